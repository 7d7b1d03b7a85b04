"""The overlap strategy: which calls it routes through the comm kernels (by structure, under any
alias, in the suite's workloads and in problems written as ParallelKernelBench writes them, the
same for a renamed copy), which it must leave alone, that its candidates carry the kernels without
colliding with the reference's names and pass the static checker, that they are correct on every
rank (CPU: the helpers' fallback, the reference's calls) and a wrong helper would be caught, when
the catalog offers it, and (on 2+ GPUs) that the kernels' paths are correct through the evaluator."""

from __future__ import annotations

import glob
import importlib.util
import shutil
import textwrap
from pathlib import Path

import pytest
import torch

from agents.analysis import Analysis
from agents.strategist.catalog import options_for
from agents.strategist.codegen import render, source_rewrites
from agents.strategist.overlap import options as overlap_opts
from agents.strategist.overlap.ar_norm import all_reduce_rmsnorm
from agents.strategist.embed import EmbedError, inline_modules
from agents.strategist.overlap.matmul_ar import matmul_all_reduce
from agents.strategist.overlap.rewrite import OVERLAP_HELPER
from agents.strategist.overlap.ring import ring_exchange
from kloom.static_check import check_candidate
from kloom.suite import find
from tests import sweeps

ROOT = Path(__file__).parents[2]
PARAMS = {"wrapper": "none", "rewrites": ["overlap"]}

#: Every suite workload the rewrite changes, with the number of calls it routes.
SUITE_MATCHES = {
    "collectives/all_reduce_large.py": 1,
    "collectives/all_reduce_small.py": 1,
    "context_parallel/cp_ring_attention.py": 1,
    "context_parallel/cp_ring_attention_causal.py": 1,
    "data_parallel/ddp_bucketed_allreduce.py": 1,
    "data_parallel/fsdp_allgather_gemm.py": 1,
    "tensor_parallel/tp_allgather_gemm.py": 1,
    "tensor_parallel/tp_allreduce_residual_rmsnorm.py": 1,
    "tensor_parallel/tp_gemm_allreduce.py": 1,
    "tensor_parallel/tp_gemm_reducescatter.py": 1,
    "tensor_parallel/tp_mlp_ag_rs.py": 2,
    "tensor_parallel/tp_sharded_rmsnorm.py": 1,
    "vocab_parallel/lm_head_cross_entropy.py": 4,
    "vocab_parallel/vocab_parallel_cross_entropy.py": 3,
    "vocab_parallel/vocab_parallel_embedding.py": 1,
    "vocab_parallel/vocab_parallel_logprobs_topk.py": 3,
}


def _candidate(source: str) -> str:
    return render(source, PARAMS, mutated_inputs=[], label="overlap_kernels")


# Where it applies ----------------------------------------------------------------------------------
def test_the_suite_workloads_it_changes():
    found = {}
    for path in sorted(glob.glob(str(ROOT / "suite" / "**" / "*.py"), recursive=True)):
        count = source_rewrites(Path(path).read_text()).get("overlap", 0)
        if count:
            found[str(Path(path).relative_to(ROOT / "suite"))] = count
    assert found == SUITE_MATCHES


@pytest.mark.parametrize(
    "name, expected",
    [
        ("tp_allgather_gemm", "return _kloom_ag_matmul(x, x_shard, 'mm', self.weight.t())"),
        ("tp_gemm_reducescatter", "_kloom_matmul_rs(out, partial)"),
        ("tp_gemm_allreduce", "out = _kloom_matmul_ar(out)"),
        ("tp_allreduce_residual_rmsnorm", "_kl_norm0 = _kloom_ar_add_rmsnorm_scaled(h, residual, self.eps, self.weight)"),
        ("all_reduce_small", "_kloom_comm_all_reduce(out)"),
        ("cp_ring_attention", "k, v = _kl_ring0.take(pass_along, k, v)"),
    ],
)
def test_the_patterns_are_found_in_the_workloads_and_a_renamed_copy(tmp_path, name, expected):
    original = Path(find(name).path)
    renamed = tmp_path / "something_else_entirely.py"
    shutil.copy(original, renamed)
    codes = [_candidate(p.read_text()) for p in (original, renamed)]
    assert codes[0] == codes[1]
    assert expected in codes[0]


# Problems written as ParallelKernelBench writes them (a module-level solution function) -------------------
PKB_GEMM_ALLREDUCE = '''
import torch
import torch.distributed as dist

@torch.no_grad()
def solution(A_local, B_local):
    A_local = A_local.contiguous()
    C_local = torch.matmul(A_local, B_local)
    C = C_local.clone()
    dist.all_reduce(C, op=dist.ReduceOp.SUM)
    return C
'''
PKB_GEMM_ALLREDUCE_GROUP = PKB_GEMM_ALLREDUCE.replace("op=dist.ReduceOp.SUM)", "op=dist.ReduceOp.SUM, group=None)")
PKB_GATHER_TRANSPOSED = '''
import torch
import torch.distributed as dist

def solution(A_local, B):
    world_size = dist.get_world_size()
    M, K_local = A_local.shape
    A_t = A_local.transpose(0, 1).contiguous()
    buf = A_t.new_empty((world_size, K_local, M))
    dist.all_gather_into_tensor(buf, A_t)
    return torch.matmul(B.transpose(0, 1), buf.reshape(world_size * K_local, M)).transpose(0, 1)
'''


def test_a_problem_in_function_form_gets_the_gemm_all_reduce_kernel():
    out, n = matmul_all_reduce(PKB_GEMM_ALLREDUCE)
    assert n == 1
    assert "C_local = _KloomProduct('mm', A_local, B_local)" in out
    assert "C = _kloom_matmul_ar(C, op=dist.ReduceOp.SUM)" in out
    assert check_candidate(_candidate(PKB_GEMM_ALLREDUCE) + "\nclass Model:\n    pass\n") == []


def test_a_group_argument_or_a_reshaped_gather_is_left_to_the_plain_calls():
    """Outside what the kernels take, nothing is fused: the all-reduce with a group keeps NCCL
    (its helper falls back at run time) and the gather whose buffer is reshaped keeps its calls."""
    assert matmul_all_reduce(PKB_GEMM_ALLREDUCE_GROUP)[1] == 0
    assert source_rewrites(PKB_GATHER_TRANSPOSED).get("overlap", 0) == 0


# The matmul + all-reduce rewrite ---------------------------------------------------------------------------------
def _src(body: str) -> str:
    head = "import torch\nimport torch.distributed as dist\nimport torch.nn.functional as F\n\n\ndef f(a, b, w, r, eps):\n"
    return head + textwrap.indent(textwrap.dedent(body), "    ")


@pytest.mark.parametrize(
    "body, expected",
    [
        ("y = a @ b\ndist.all_reduce(y)\nreturn y\n", "y = _kloom_matmul_ar(y)"),
        ("y = F.linear(a, w)\nn = y.shape[0]\ndist.all_reduce(y, dist.ReduceOp.SUM)\nreturn y, n\n", "y = _kloom_matmul_ar(y, op=dist.ReduceOp.SUM)"),
        ("y = torch.matmul(a, b)\nz = y.clone()\ndist.all_reduce(z)\nreturn z\n", "z = _kloom_matmul_ar(z)"),
    ],
)
def test_a_matmul_then_all_reduce_is_found(body, expected):
    out, n = matmul_all_reduce(_src(body))
    assert n == 1 and expected in out


@pytest.mark.parametrize(
    "body, why",
    [
        ("y = a @ b\nn = y.sum()\ndist.all_reduce(y)\nreturn y, n\n", "the product's values are read between"),
        ("y = a @ b\na.add_(1)\ndist.all_reduce(y)\nreturn y\n", "an operand changes between"),
        ("y = a @ b\ndist.all_reduce(y, op=dist.ReduceOp.MAX)\nreturn y\n", "not a sum"),
        ("y = a @ b\ndist.all_reduce(y, async_op=True)\nreturn y\n", "asynchronous"),
        ("y = a @ b\nz = y.clone()\ndist.all_reduce(z)\nreturn z, y\n", "the product is read again after the copy was reduced"),
        ("y = F.linear(a, w, r)\ndist.all_reduce(y)\nreturn y\n", "a bias would be summed over ranks"),
        ("y = a @ b\nif eps:\n    dist.all_reduce(y)\nreturn y\n", "the all-reduce is conditional"),
        ("y = a @ b\ng = lambda: y.sum()\ndist.all_reduce(y)\nreturn y, g\n", "a closure reads the product"),
    ],
)
def test_unsafe_matmul_all_reduce_pairs_stay(body, why):
    source = _src(body)
    out, n = matmul_all_reduce(source)
    assert n == 0 and out == source, why


# The all-reduce + residual + RMSNorm rewrite -------------------------------------------------------------------------
NORM = "hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)"


@pytest.mark.parametrize(
    "norm",
    [
        NORM,
        "hf * torch.rsqrt((hf ** 2).mean(dim=-1, keepdim=True) + eps)",
        "torch.rsqrt((hf * hf).mean(-1, keepdim=True).add(eps)) * hf",
        "hf * (hf.square().mean(-1, keepdim=True) + eps).rsqrt()",
    ],
)
@pytest.mark.parametrize("add", ["h += r", "h = h + r", "h = r + h", "h.add_(r)"])
def test_an_all_reduce_residual_and_rmsnorm_are_found_in_their_spellings(norm, add):
    source = _src(f"h = a.clone()\ndist.all_reduce(h)\n{add}\nhf = h.float()\ny = w * ({norm}).to(h.dtype)\nreturn y, h\n")
    out, n = all_reduce_rmsnorm(source)
    assert n == 1, norm
    # The weight that follows is fused too, and the upcast nothing reads any more is gone.
    assert "_kl_norm0 = _kloom_ar_add_rmsnorm_scaled(h, r, eps, w)" in out and "y = _kl_norm0" in out
    assert "dist.all_reduce" not in out and "h.float()" not in out


def test_the_weight_after_a_named_norm_is_fused_as_the_suite_writes_it():
    body = f"h = a.clone()\ndist.all_reduce(h)\nh += r\nhf = h.float()\nn = {NORM}\nreturn self.weight * n.to(h.dtype), h\n"
    out, n = all_reduce_rmsnorm(_src(body))
    assert n == 1 and "_kl_norm0 = _kloom_ar_add_rmsnorm_scaled(h, r, eps, self.weight)" in out and "return (_kl_norm0, h)" in out
    assert "n = " not in out and "h.float()" not in out


@pytest.mark.parametrize(
    "tail, why",
    [
        ("y = w * n.to(h.dtype)\nreturn y, n\n", "the float32 norm is read again"),
        ("y = w() * n.to(h.dtype)\nreturn y\n", "the weight is a call"),
        ("z = 1\ny = w * n.to(h.dtype)\nreturn y, z\n", "a statement stands between"),
        ("y = w * n.to(torch.bfloat16)\nreturn y\n", "cast to another dtype than h's"),
        ("y = f(w * n.to(h.dtype))\nreturn y\n", "another call in the statement"),
        ("y = w * n.to(h.dtype) if c else n\nreturn y\n", "conditional"),
        ("y = h * n.to(h.dtype)\nreturn y\n", "the weight reads h"),
    ],
)
def test_an_epilogue_that_is_not_safe_to_fuse_stays(tail, why):
    out, n = all_reduce_rmsnorm(_src(f"h = a.clone()\ndist.all_reduce(h)\nh += r\nhf = h.float()\nn = {NORM}\n" + tail))
    assert n == 1 and "_kl_norm0 = _kloom_ar_add_rmsnorm(h, r, eps)" in out and "_scaled" not in out, why


def test_an_upcast_still_read_is_kept():
    out, n = all_reduce_rmsnorm(_src(f"h = a.clone()\ndist.all_reduce(h)\nhf = h.float()\nn = {NORM}\nreturn n, hf\n"))
    assert n == 1 and "hf = h.float()" in out


def test_the_norm_of_an_inline_upcast_without_residual():
    source = _src("h = a.clone()\ndist.all_reduce(h)\nx = h.float() * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6)\nreturn x\n")
    out, n = all_reduce_rmsnorm(source)
    assert n == 1 and "_kl_norm0 = _kloom_ar_add_rmsnorm(h, None, 1e-06)" in out and "x = _kl_norm0" in out


@pytest.mark.parametrize(
    "body, why",
    [
        (f"dist.all_reduce(h)\nh += r\nh = h * 2\nhf = h.float()\ny = {NORM}\n", "h is written between"),
        (f"dist.all_reduce(h)\nh += r\neps = 0.1\nhf = h.float()\ny = {NORM}\n", "eps is assigned between"),
        (f"dist.all_reduce(h)\nhf = h.float()\ny = {NORM} if eps else hf\n", "the norm is conditional"),
        (f"dist.all_reduce(h, group=None)\nhf = h.float()\ny = {NORM}\n", "a group argument"),
        (f"dist.all_reduce(h, op=dist.ReduceOp.MAX)\nhf = h.float()\ny = {NORM}\n", "not a sum"),
        ("dist.all_reduce(h)\ny = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)\n", "the norm is not taken in float32"),
        (f"dist.all_reduce(h)\nhf = h.float()\ny = hf * torch.rsqrt(hf.pow(2).mean(0, keepdim=True) + eps)\n", "not over the last dimension"),
        (f"dist.all_reduce(h)\nhf = h.float()\nhf = hf + 1\ny = {NORM}\n", "the upcast is changed before the norm"),
    ],
)
def test_unsafe_all_reduce_norms_stay(body, why):
    source = _src("h = a.clone()\n" + body + "return y\n")
    out, n = all_reduce_rmsnorm(source)
    assert n == 0 and out == source, why


# The ring loop -----------------------------------------------------------------------------------------------------
RING = """
import torch
import torch.distributed as dist


def shift(k, v):
    rank, world = dist.get_rank(), dist.get_world_size()
    k_next, v_next = torch.empty_like(k), torch.empty_like(v)
    ops = [
        dist.P2POp(dist.isend, k, (rank + 1) % world),
        dist.P2POp(dist.isend, v, (rank + 1) % world),
        dist.P2POp(dist.irecv, k_next, (rank - 1) % world),
        dist.P2POp(dist.irecv, v_next, (rank - 1) % world),
    ]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return k_next, v_next


def f(q, k, v):
    out = 0
    for step in range(dist.get_world_size()):
        if step:
            k, v = shift(k, v)
        out = out + q @ k.transpose(-1, -2) @ v
    return out
"""


def test_a_ring_loop_of_plain_shifts_takes_pushed_blocks():
    out, n = ring_exchange(RING)
    assert n == 1
    assert "_kl_ring0 = _KloomRing()" in out and "k, v = _kl_ring0.take(shift, k, v)" in out


@pytest.mark.parametrize(
    "old, new, why",
    [
        ("dist.P2POp(dist.isend, k, (rank + 1) % world)", "dist.P2POp(dist.isend, k, (rank + 2) % world)", "not the next rank"),
        ("dist.P2POp(dist.irecv, k_next, (rank - 1) % world)", "dist.P2POp(dist.irecv, k_next, (rank + 1) % world)", "not from the previous rank"),
        ("dist.P2POp(dist.isend, v, (rank + 1) % world)", "dist.P2POp(dist.isend, k, (rank + 1) % world)", "one block sent twice, the other never"),
        ("    return k_next, v_next", "    return v_next, k_next", "the blocks come back swapped"),
        ("    return k_next, v_next", "    k_next.mul_(2)\n    return k_next, v_next", "the shift changes what it received"),
        ("dist.P2POp(dist.isend, k, (rank + 1) % world)", "dist.P2POp(dist.isend, k, (rank + 1) % world, group=None)", "a group"),
        ("        if step:\n            k, v = shift(k, v)", "        if step:\n            k, v = shift(k, v)\n        k = k * 2", "the loop changes the state"),
    ],
)
def test_a_ring_loop_whose_exchange_is_not_a_plain_shift_stays(old, new, why):
    source = RING.replace(old, new, 1)
    assert source != RING
    out, n = ring_exchange(source)
    assert n == 0 and out == source, why


# The candidate's helper block ------------------------------------------------------------------------------------
def test_the_helper_block_passes_the_static_checker_and_keeps_the_references_names(tmp_path):
    reference = (
        "import torch\nfrom dataclasses import field\n\n\ndef field_size():\n    return 1\n\n\n"
        "def supported(x):\n    return x\n\n\ndist = 'a name of the reference'\n\n\nclass Model(torch.nn.Module):\n    pass\n"
    )
    code = reference + OVERLAP_HELPER
    assert check_candidate(code) == []
    path = tmp_path / "candidate_names.py"
    path.write_text(code)  # Triton reads its kernels' source from the file, as in a candidate
    spec = importlib.util.spec_from_file_location("candidate_names", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.dist == "a name of the reference" and module.supported(3) == 3 and module.field.__module__ == "dataclasses"
    assert callable(module._kloom_ag_matmul) and module._KL_OVERLAP_STRICT is False and module._KL_OVERLAP_FORCE is None


def test_the_bundler_refuses_a_function_that_shadows_a_module_name(tmp_path, monkeypatch):
    package = tmp_path / "kernels_shadow_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text("def helper():\n    return 1\n\n\ndef user(helper):\n    return helper\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EmbedError, match="binds the module-level name"):
        inline_modules(["kernels_shadow_pkg.mod"])


@pytest.mark.parametrize("rel", sorted(SUITE_MATCHES))
def test_the_candidates_pass_the_static_checker(rel):
    assert check_candidate(_candidate((ROOT / "suite" / rel).read_text())) == [], rel


# The catalog ---------------------------------------------------------------------------------------------------------
def _analysis(**overrides) -> Analysis:
    base = dict(
        family="x", world_size=2, device="cuda", collectives=["allgather"], collective_sizes={"allgather": 1 << 26}, ops=["aten::mm"],
        n_kernels=3, n_elementwise=0, n_matmul=1, n_attention=0, host_syncs=0, host_sync_ops=[],
        patterns=["collective_then_matmul"], input_shapes=[], dtypes=["bfloat16"], total_input_bytes=0, param_bytes=0,
        collective_bytes=1 << 26, mutated_inputs=[], output_shapes=[], dominant="compute", reference_ms=5.0,
        source_rewrites={"fused_ag_matmul": 1, "overlap": 1},
    )
    base.update(overrides)
    return Analysis(**base)


def test_the_catalog_offers_it_by_structure_after_the_options_that_won_before():
    options = {o.strategy: o for o in options_for(_analysis())}
    assert options["overlap_kernels"].params == PARAMS
    assert options["overlap_kernels"].score < options["fused_ag_matmul"].score
    assert "not yet measured on several GPUs" in options["overlap_kernels"].rationale
    norm = _analysis(collectives=["allreduce"], collective_sizes={"allreduce": 64 << 20}, ops=["aten::rsqrt", "aten::add"], patterns=["collective_then_compute"], source_rewrites={"overlap": 1})
    assert "RMSNorm" in {o.strategy: o for o in options_for(norm)}["overlap_kernels"].rationale


@pytest.mark.parametrize(
    "overrides, why",
    [
        (dict(device="cpu"), "not on CPU"),
        (dict(world_size=1), "one rank"),
        (dict(dtypes=["float32"]), "the kernels take bf16/fp16 only"),
        (dict(source_rewrites={"fused_ag_matmul": 1}), "the rewrite changes nothing"),
        (dict(patterns=["compute_then_collective"], collective_sizes={"allgather": 1 << 26}), "the trace shows no pattern the kernels serve"),
    ],
)
def test_the_catalog_does_not_offer_it_where_it_cannot_apply(overrides, why):
    assert "overlap_kernels" not in {o.strategy for o in options_for(_analysis(**overrides))}, why


def test_the_all_reduce_cap_is_the_runtimes():
    source = Path(ROOT / "agents" / "strategist" / "overlap" / "ar_runtime.py").read_text()
    assert f"ALL_REDUCE_MAX_BYTES = {overlap_opts.ALL_REDUCE_MAX >> 20} << 20" in source


# Under the real evaluator (CPU: the fallback runs) -------------------------------------------------------------------
EVALUATED = [
    "tensor_parallel/tp_allreduce_residual_rmsnorm.py", "tensor_parallel/tp_gemm_allreduce.py", "tensor_parallel/tp_mlp_ag_rs.py",
    "collectives/all_reduce_small.py", "context_parallel/cp_ring_attention_causal.py",
]  # fmt: skip


@pytest.mark.parametrize("rel", sweeps.params(EVALUATED, every=2))  # CI: every other one (tests/sweeps.py)
def test_a_rewritten_candidate_is_correct_on_every_rank(evaluator, tmp_path, rel):
    path = ROOT / "suite" / rel
    candidate = tmp_path / "candidate.py"
    candidate.write_text(_candidate(path.read_text()))
    result = evaluator.evaluate(path, candidate, world_size=2)
    assert result.status == "correct", result.error


@pytest.mark.parametrize(
    "name, old, new",
    [
        ("tp_allreduce_residual_rmsnorm", "        h += residual\n    hf = h.float()", "        h += residual\n        h += residual\n    hf = h.float()"),
        ("tp_gemm_allreduce", "\n    y = product.value()\n", "\n    y = product.value().flip(0)\n"),
    ],
)
def test_a_wrong_helper_would_be_caught(evaluator, tmp_path, name, old, new):
    path = Path(find(name).path)
    code = _candidate(path.read_text())
    broken = code.replace(old, new, 1)
    assert broken != code
    candidate = tmp_path / "candidate.py"
    candidate.write_text(broken)
    assert evaluator.evaluate(path, candidate, world_size=2).status == "incorrect"


# On GPUs: each kernel path through the evaluator -------------------------------------------------------------------
needs_two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (the comm kernels reach a peer's memory)")


@pytest.fixture(scope="module")
def cuda_evaluator():
    from services.worker.evaluator import EvalSettings, Evaluator

    with Evaluator("cuda", EvalSettings.for_device("cuda", min_iters=5, max_iters=20)) as ev:
        yield ev


def _forced(code: str, way: str) -> str:
    """The candidate with every helper held to one way (no tuning) and strict: a CUDA call that
    does not take it raises, so a correct result means that way computed it."""
    forced = code.replace("_KL_OVERLAP_STRICT = False", "_KL_OVERLAP_STRICT = True", 1).replace("_KL_OVERLAP_FORCE = None", f"_KL_OVERLAP_FORCE = {way!r}", 1)
    assert forced.count("True") > code.count("True") and way in forced
    return forced


GPU_CASES = [
    ("tp_allgather_gemm", "triton_ce"), ("tp_allgather_gemm", "triton_sm16"), ("tp_allgather_gemm", "cublas_ce_chunks2"),
    ("fsdp_allgather_gemm", "triton_ce_chunks4"),
    ("tp_gemm_reducescatter", "triton"), ("tp_gemm_reducescatter", "cublas"),
    ("tp_gemm_allreduce", "triton"), ("tp_gemm_allreduce", "cublas"),
    ("tp_allreduce_residual_rmsnorm", "one_shot"), ("tp_allreduce_residual_rmsnorm", "two_shot"),
    ("all_reduce_small", "one_shot"),
    ("cp_ring_attention", "ring"), ("cp_ring_attention_causal", "ring"),
]  # fmt: skip


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("name, way", GPU_CASES)
def test_each_kernel_path_is_correct_on_cuda(cuda_evaluator, tmp_path, name, way):
    path = Path(find(name).path)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(_forced(_candidate(path.read_text()), way))
    result = cuda_evaluator.evaluate(path, candidate, world_size=2)
    assert result.status == "correct", result.error
    print(f"{name} [{way}]: {result.summary()}")


@pytest.mark.gpu
@needs_two_gpus
def test_a_wrong_kernel_path_would_be_caught_on_cuda(cuda_evaluator, tmp_path):
    path = Path(find("tp_allgather_gemm").path)
    code = _forced(_candidate(path.read_text()), "triton_ce")
    # Each output row stored one row down: a real error (shifting ``rows`` itself, as this test
    # once did, moves the loads and the stores together and still computes every row right).
    broken = code.replace("c_ptrs = c_ptr + rows[:, None] * stride_cm", "c_ptrs = c_ptr + ((rows + 1) % M)[:, None] * stride_cm", 1)
    assert broken != code
    candidate = tmp_path / "candidate.py"
    candidate.write_text(broken)
    assert cuda_evaluator.evaluate(path, candidate, world_size=2).status == "incorrect"
