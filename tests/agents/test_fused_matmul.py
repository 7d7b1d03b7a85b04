"""The fused all-gather/reduce-scatter matmul rewrite: which pairs it finds (by structure, under
any alias), which it must leave alone, that the rewritten candidates pass the static checker and
are judged correct on every rank (CPU: the helpers' fallback, the original calls), that a wrong
helper would be caught, and (on GPUs) that the fused symmetric-memory path is what runs."""

from __future__ import annotations

import glob
import shutil
import textwrap
from pathlib import Path

import pytest
import torch
from agent_helpers import fresh_runtime

from agents.analysis import Analysis
from agents.strategist.catalog import options_for
from agents.strategist.codegen import NotApplicable, render, source_rewrites
from agents.strategist.fused_matmul import fused_ag_matmul
from kloom.static_check import check_candidate
from kloom.suite import find
from services.worker.evaluator import EvalSettings, Evaluator
from tests import sweeps

ROOT = Path(__file__).parents[2]
PARAMS = {"wrapper": "none", "rewrites": ["fused_ag_matmul"]}

#: Every suite workload the rewrite changes, with the number of pairs it rewrites.
SUITE_MATCHES = {
    "data_parallel/fsdp_allgather_gemm.py": 1,
    "tensor_parallel/tp_allgather_gemm.py": 1,
    "tensor_parallel/tp_gemm_reducescatter.py": 1,
    "tensor_parallel/tp_mlp_ag_rs.py": 2,
    "vocab_parallel/lm_head_cross_entropy.py": 1,
}


def _src(body: str, imports: str = "import torch\nimport torch.distributed as dist\nimport torch.nn.functional as F\n") -> str:
    return imports + "\n\ndef f(shard, w, b, x, out):\n" + textwrap.indent(textwrap.dedent(body), "    ")


# Where it applies -------------------------------------------------------------------------------------
def test_the_suite_workloads_it_changes():
    found = {}
    for path in sorted(glob.glob(str(ROOT / "suite" / "**" / "*.py"), recursive=True)):
        count = source_rewrites(Path(path).read_text()).get("fused_ag_matmul", 0)
        if count:
            found[str(Path(path).relative_to(ROOT / "suite"))] = count
    assert found == SUITE_MATCHES


@pytest.mark.parametrize(
    "name, expected",
    [
        ("tp_allgather_gemm", "return _kloom_ag_matmul(x, x_shard, 'mm', self.weight.t())"),
        ("fsdp_allgather_gemm", "return _kloom_ag_matmul(weight, shard, 'linear_t', x)"),
        ("tp_gemm_reducescatter", "partial = _KloomProduct('mm', x, self.weight.t())"),
    ],
)
def test_the_tensor_parallel_patterns_are_found_in_the_workloads_and_a_renamed_copy(tmp_path, name, expected):
    original = Path(find(name).path)
    renamed = tmp_path / "something_else_entirely.py"
    shutil.copy(original, renamed)
    outs = []
    for path in (original, renamed):
        out, n = fused_ag_matmul(path.read_text())
        assert n == 1 and expected in out
        assert "all_gather_into_tensor(" not in out and "reduce_scatter_tensor(" not in out
        outs.append(render(path.read_text(), PARAMS, mutated_inputs=[], label="fused_ag_matmul"))
    assert outs[0] == outs[1]
    if name == "tp_gemm_reducescatter":
        assert "_kloom_matmul_rs(out, partial)" in outs[0]
        # the shape questions between the matmul and the collective are answered by the pending product
        assert "out = torch.empty(partial.shape[0] // world, partial.shape[1], dtype=partial.dtype, device=partial.device)" in outs[0]


@pytest.mark.parametrize(
    "imports, gather",
    [
        ("import torch\nimport torch.distributed as dist\nimport torch.nn.functional as F\n", "dist.all_gather_into_tensor"),
        ("import torch\nimport torch.distributed\nimport torch.nn.functional as F\n", "torch.distributed.all_gather_into_tensor"),
        ("import torch\nfrom torch import distributed as dd\nimport torch.nn.functional as F\n", "dd.all_gather_into_tensor"),
        ("import torch\nfrom torch.distributed import all_gather_into_tensor as agt\nimport torch.nn.functional as F\n", "agt"),
    ],
)
@pytest.mark.parametrize(
    "matmul, call",
    [
        ("buf @ w", "_kloom_ag_matmul(buf, shard, 'mm', w)"),
        ("buf @ w.t()", "_kloom_ag_matmul(buf, shard, 'mm', w.t())"),
        ("torch.matmul(buf, w)", "_kloom_ag_matmul(buf, shard, 'mm', w)"),
        ("F.linear(buf, w)", "_kloom_ag_matmul(buf, shard, 'linear', w)"),
        ("F.linear(buf, w, b)", "_kloom_ag_matmul(buf, shard, 'linear', w, b)"),
        ("F.linear(input=buf, weight=w, bias=b)", "_kloom_ag_matmul(buf, shard, 'linear', w, b)"),
        ("x @ buf.t()", "_kloom_ag_matmul(buf, shard, 'mm_t', x)"),
        ("x @ buf.T", "_kloom_ag_matmul(buf, shard, 'mm_T', x)"),
        ("F.linear(x, buf, b)", "_kloom_ag_matmul(buf, shard, 'linear_t', x, b)"),
    ],
)
def test_an_all_gather_then_matmul_is_found_under_every_alias(imports, gather, matmul, call):
    source = _src(
        f"""
        buf = shard.new_empty(4 * shard.shape[0], shard.shape[1])
        {gather}(buf, shard)
        h = x.float()
        y = torch.relu({matmul})
        return y
        """,
        imports,
    )
    out, n = fused_ag_matmul(source)
    assert n == 1, source
    assert f"y = torch.relu({call})" in out
    assert "all_gather_into_tensor" not in out.split("def f")[1]


def test_other_function_aliases_for_matmul_and_linear():
    source = _src(
        """
        buf = torch.empty(8, 4)
        ag(buf, shard)
        y = mm(buf, w)
        buf2 = torch.empty(8, 4)
        ag(buf2, x)
        return y, lin(b, buf2)
        """,
        "from torch import matmul as mm\nfrom torch.nn.functional import linear as lin\nfrom torch.distributed import all_gather_into_tensor as ag\nimport torch\n",
    )
    out, n = fused_ag_matmul(source)
    assert n == 2
    assert "y = _kloom_ag_matmul(buf, shard, 'mm', w)" in out and "_kloom_ag_matmul(buf2, x, 'linear_t', b)" in out


def test_a_buffer_read_again_later_is_returned_too():
    source = _src(
        """
        buf = torch.empty(8, 4)
        dist.all_gather_into_tensor(buf, shard)
        y = buf @ w
        return y, buf.sum()
        """
    )
    out, n = fused_ag_matmul(source)
    assert n == 1
    assert "buf, y = _kloom_ag_matmul(buf, shard, 'mm', w, keep=True)" in out


def test_a_matmul_then_reduce_scatter_is_found_with_the_explicit_sum_and_through_linear():
    source = _src(
        """
        y = F.linear(x, w)
        z = torch.empty(y.shape[0] // 2, y.size(1), dtype=y.dtype, device=y.device)
        dist.reduce_scatter_tensor(z, y, op=dist.ReduceOp.SUM)
        return z
        """
    )
    out, n = fused_ag_matmul(source)
    assert n == 1
    assert "y = _KloomProduct('linear', x, w)" in out
    assert "_kloom_matmul_rs(z, y, op=dist.ReduceOp.SUM)" in out


# Where it must not apply ---------------------------------------------------------------------------------
GATHER = "buf = torch.empty(8, 4)\n"


@pytest.mark.parametrize(
    "body, why",
    [
        (GATHER + "dist.all_gather_into_tensor(buf, shard)\nn = buf.sum()\ny = buf @ w\nreturn y, n\n", "the buffer is used between the two calls"),
        (GATHER + "dist.all_gather_into_tensor(buf, shard)\nshard.add_(1)\ny = buf @ w\nreturn y\n", "the shard changes between the calls"),
        (GATHER + "dist.all_gather_into_tensor(buf, shard)\nx.mul_(2)\ny = buf @ w\nreturn y\n", "a statement between has side effects"),
        (GATHER + "dist.all_gather_into_tensor(buf, shard)\ndist.all_reduce(x)\ny = buf @ w\nreturn y\n", "another collective between"),
        (GATHER + "dist.all_gather_into_tensor(buf, shard)\nif x.numel():\n    x = x + 1\ny = buf @ w\nreturn y\n", "a branch between"),
        (GATHER + "dist.all_gather_into_tensor(buf, shard, group=None)\ny = buf @ w\nreturn y\n", "a group argument"),
        (GATHER + "dist.all_gather_into_tensor(buf, shard, async_op=True)\ny = buf @ w\nreturn y\n", "asynchronous"),
        ("bufs = [torch.empty(4, 4) for _ in range(2)]\ndist.all_gather(bufs, shard)\ny = torch.cat(bufs) @ w\nreturn y\n", "a gather into a list"),
        (GATHER + "dist.all_gather_into_tensor(buf, shard)\ny = w @ buf\nreturn y\n", "the buffer is a non-transposed right operand"),
        (GATHER + "dist.all_gather_into_tensor(buf, shard)\ny = buf @ w if x.numel() else x\nreturn y\n", "the matmul is conditional"),
        (GATHER + "dist.all_gather_into_tensor(buf, shard)\nreturn (buf @ w).sum(), buf\n", "read again, but not a plain assignment"),
        ("dist.all_gather_into_tensor(out, shard)\nreturn out @ w\n", "the buffer is an argument the caller sees"),
        ("y = x @ w\ndist.reduce_scatter_tensor(out, y, op=dist.ReduceOp.MAX)\nreturn out\n", "a non-default reduction"),
        ("y = x @ w\ndist.reduce_scatter_tensor(out, y, group=None)\nreturn out\n", "a group argument"),
        ("y = x @ w\ndist.reduce_scatter_tensor(out, y)\nreturn out, y\n", "the product is used otherwise"),
        ("y = x @ w\nn = y.sum()\ndist.reduce_scatter_tensor(out, y)\nreturn out, n\n", "the product's values are read between"),
        ("y = x @ w\nx.add_(1)\ndist.reduce_scatter_tensor(out, y)\nreturn out\n", "an operand changes between"),
        ("y = F.linear(x, w, b)\ndist.reduce_scatter_tensor(out, y)\nreturn out\n", "a bias would be summed over ranks"),
    ],
)
def test_unsafe_pairs_stay_as_they_are(body, why):
    source = _src(body)
    out, n = fused_ag_matmul(source)
    assert n == 0 and out == source, why


def test_render_refuses_a_reference_with_nothing_to_fuse():
    source = Path(find("all_reduce_small").path).read_text()
    with pytest.raises(NotApplicable):
        render(source, PARAMS, mutated_inputs=[], label="t")


# The helpers ----------------------------------------------------------------------------------------------------
def _helpers() -> dict:
    namespace = fresh_runtime("agents.strategist.fused_matmul.runtime")  # the module the candidate copies
    return namespace


def test_the_pending_product_answers_shape_questions_and_raises_what_the_matmul_raises():
    h = _helpers()
    a, b = torch.randn(6, 4, dtype=torch.bfloat16), torch.randn(4, 5, dtype=torch.bfloat16)
    p = h["_KloomProduct"]("mm", a, b)
    assert p.shape == (6, 5) and p.size(1) == 5 and p.size() == (6, 5) and p.dim() == 2 and p.ndim == 2
    assert p.dtype == torch.bfloat16 and p.device == a.device
    assert torch.equal(p.value(), a @ b)
    lin = h["_KloomProduct"]("linear", torch.randn(2, 3, 4), torch.randn(7, 4))
    assert lin.shape == (2, 3, 7)
    with pytest.raises(RuntimeError):
        h["_KloomProduct"]("mm", a, torch.randn(3, 5, dtype=torch.bfloat16))


def test_the_fused_path_is_not_taken_off_cuda():
    h = _helpers()
    assert h["_kloom_symm_group"]([torch.randn(2, 2)]) is None
    assert h["_KL_FUSED"]["broken"] is None


def test_the_candidates_pass_the_static_checker():
    for rel in SUITE_MATCHES:
        code = render((ROOT / "suite" / rel).read_text(), PARAMS, mutated_inputs=[], label="fused_ag_matmul")
        assert check_candidate(code) == [], rel


# The catalog ---------------------------------------------------------------------------------------------------
def _analysis(**overrides) -> Analysis:
    base = dict(
        family="x", world_size=4, device="cuda", collectives=["allgather"], collective_sizes={"allgather": 1 << 26}, ops=[],
        n_kernels=3, n_elementwise=0, n_matmul=1, n_attention=0, host_syncs=0, host_sync_ops=[],
        patterns=["collective_then_matmul"], input_shapes=[], dtypes=[], total_input_bytes=0, param_bytes=0,
        collective_bytes=1 << 26, mutated_inputs=[], output_shapes=[], dominant="compute", reference_ms=5.0,
        source_rewrites={"fused_ag_matmul": 1},
    )
    base.update(overrides)
    return Analysis(**base)


def test_the_catalog_offers_it_on_cuda_above_the_inductor_pass():
    options = {o.strategy: o for o in options_for(_analysis())}
    assert options["fused_ag_matmul"].params == PARAMS
    assert options["fused_ag_matmul"].score > options["micro_pipeline_tp"].score
    assert max(options.values(), key=lambda o: o.score).strategy == "fused_ag_matmul"
    for analysis in (_analysis(device="cpu"), _analysis(world_size=1), _analysis(source_rewrites={})):
        assert "fused_ag_matmul" not in {o.strategy for o in options_for(analysis)}


# Under the real evaluator (CPU: the fallback runs) ---------------------------------------------------------------


@pytest.mark.parametrize("rel", sweeps.params(sorted(SUITE_MATCHES), every=2))  # CI: every other one (tests/sweeps.py)
def test_a_rewritten_candidate_is_correct_on_every_rank(evaluator, tmp_path, rel):
    path = ROOT / "suite" / rel
    candidate = tmp_path / "candidate.py"
    candidate.write_text(render(path.read_text(), PARAMS, mutated_inputs=[], label="fused_ag_matmul"))
    result = evaluator.evaluate(path, candidate, world_size=2)
    assert result.status == "correct", result.error
    assert len(result.trials) >= 5 and all(t.ok for t in result.trials)


@pytest.mark.parametrize(
    "name, old, new, why",
    [
        ("tp_allgather_gemm", "y = buf @ other\n", "y = buf @ other.flip(0)\n", "the right operand's rows reversed"),
        ("fsdp_allgather_gemm", "y = _kl_F.linear(other, buf, bias)\n", "y = _kl_F.linear(other, buf.flip(0), bias)\n", "the gathered blocks reversed"),
        ("tp_gemm_reducescatter", "value = product.value()\n", "value = product.value().flip(0)\n", "the scattered blocks swapped"),
    ],
)
def test_a_wrong_helper_would_be_caught(evaluator, tmp_path, name, old, new, why):
    """Control: a helper that computes something else is judged incorrect."""
    path = Path(find(name).path)
    code = render(path.read_text(), PARAMS, mutated_inputs=[], label="fused_ag_matmul")
    broken = code.replace(old, new, 1)
    assert broken != code
    candidate = tmp_path / "candidate.py"
    candidate.write_text(broken)
    result = evaluator.evaluate(path, candidate, world_size=2)
    assert result.status == "incorrect", why


# On GPUs: the fused symmetric-memory path ----------------------------------------------------------------------------
needs_two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")


@pytest.fixture(scope="module")
def cuda_evaluator():
    with Evaluator("cuda", EvalSettings.for_device("cuda", min_iters=5, max_iters=20)) as ev:
        yield ev


def _strict(code: str) -> str:
    """The candidate with the helpers' strict flag set: a CUDA call that does not take the fused
    path (or a fused op that fails) raises, so a correct result means the fused op computed it."""
    strict = code.replace("_KL_FUSED_STRICT = False", "_KL_FUSED_STRICT = True", 1)
    assert strict != code
    return strict


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("name", ["tp_allgather_gemm", "fsdp_allgather_gemm", "tp_gemm_reducescatter"])
def test_the_fused_path_is_correct_on_cuda(cuda_evaluator, tmp_path, name):
    path = Path(find(name).path)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(_strict(render(path.read_text(), PARAMS, mutated_inputs=[], label="fused_ag_matmul")))
    result = cuda_evaluator.evaluate(path, candidate, world_size=2)
    assert result.status == "correct", result.error
    print(f"{name}: {result.summary()}")


@pytest.mark.gpu
@needs_two_gpus
def test_a_wrong_fused_path_would_be_caught_on_cuda(cuda_evaluator, tmp_path):
    path = Path(find("tp_allgather_gemm").path)
    code = _strict(render(path.read_text(), PARAMS, mutated_inputs=[], label="fused_ag_matmul"))
    broken = code.replace("        y = outs[0]\n", "        y = outs[0].flip(0)\n", 1)
    assert broken != code
    candidate = tmp_path / "candidate.py"
    candidate.write_text(broken)
    result = cuda_evaluator.evaluate(path, candidate, world_size=2)
    assert result.status == "incorrect"


# The fused path's algebra, on CPU ------------------------------------------------------------------------------------
def _fused_on_cpu(rank: int, world: int, store_path: str, results) -> None:
    """One gloo rank: the helpers with their fused path forced on for CPU tensors, the fused ops
    served by torch's own reference implementations (all-gather or reduce-scatter, then matmul),
    compared with the original calls for every kind of matmul the rewrite produces."""
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm

    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world)
    torch.library.impl("symm_mem::fused_all_gather_matmul", "CPU")(symm._fused_all_gather_matmul_fallback)
    torch.library.impl("symm_mem::fused_matmul_reduce_scatter", "CPU")(symm._fused_matmul_reduce_scatter_fallback)
    h = _helpers()
    group = dist.group.WORLD.group_name
    h["_KL_FUSED"]["group"] = group
    plain = h["_kloom_symm_group"]
    fused = lambda tensors: group  # noqa: E731
    torch.manual_seed(rank)
    shard, w, x, bias = torch.randn(3, 2, 4), torch.randn(4, 5), torch.randn(2, 6, 4), torch.randn(6 * world)
    shard2 = torch.randn(6, 4)
    cases = [
        ("mm", shard, w, None), ("linear", shard, w.t(), None), ("linear", shard, w.t(), torch.randn(5)),
        ("mm_t", shard2, x, None), ("mm_T", shard2, x, None), ("linear_t", shard2, x, bias),
    ]
    errors = []
    for kind, s, other, b in cases:
        for keep in (False, True):
            outs = []
            for chooser in (plain, fused):
                h["_kloom_symm_group"] = chooser
                buf = s.new_empty(world * s.shape[0], *s.shape[1:])
                outs.append(h["_kloom_ag_matmul"](buf, s, kind, other, b, keep=keep))
            ref, got = (outs[0], outs[1]) if keep else ((None, outs[0]), (None, outs[1]))
            if not torch.allclose(ref[1], got[1], atol=1e-5) or (keep and not torch.equal(ref[0], got[0])):
                errors.append((kind, keep))
    for kind, a, b in [("mm", torch.randn(4, 3, 5), torch.randn(5, 2)), ("linear", torch.randn(4, 5), torch.randn(3, 5))]:
        outs = []
        for chooser in (plain, fused):
            h["_kloom_symm_group"] = chooser
            product = h["_KloomProduct"](kind, a, b)
            out = torch.empty(product.shape[0] // world, *product.shape[1:])
            h["_kloom_matmul_rs"](out, product)
            outs.append(out)
        if not torch.allclose(outs[0], outs[1], atol=1e-5):
            errors.append((kind, "rs"))
    results.put((rank, errors, dict(h["_KL_FUSED"])))
    dist.destroy_process_group()


@pytest.mark.slow
def test_the_fused_path_computes_what_the_original_calls_compute(tmp_path):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    world = 2
    procs = [ctx.Process(target=_fused_on_cpu, args=(r, world, str(tmp_path / "store"), results)) for r in range(world)]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for rank, errors, counts in got:
        assert errors == [], (rank, errors)
        assert counts["broken"] is None and counts["ag_matmul"] == 12 and counts["matmul_rs"] == 2, counts
