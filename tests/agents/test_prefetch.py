"""The loop-carried exchange prefetch: which loops it pipelines (by structure, under any name),
which it must leave alone, that the rewritten loop exchanges and computes with exactly the values
the reference does, that the strategist offers it first for ring attention whatever the file is
called, and that rewritten candidates are correct on every rank under the real evaluator (and a
wrong prefetch is caught)."""

from __future__ import annotations

import difflib
import re
import shutil
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from agent_helpers import fresh_runtime, planning_context

from agents.analysis import Analysis, build_analysis
from agents.strategist import OfflinePlanner
from agents.strategist.catalog import options_for
from agents.strategist.codegen import NotApplicable, render, source_rewrites
from agents.strategist.prefetch import PREFETCH_HELPER, prefetch_exchange
from kloom.static_check import check_candidate
from kloom.suite import find
from services.worker.evaluator import EvalSettings, Evaluator
from tests import eval_records, sweeps

RING = ("cp_ring_attention", "cp_ring_attention_causal")
#: Every suite file the rewrite applies to (the two ring-attention workloads: the only loops whose
#: carried state a point-to-point exchange passes on; pipeline_send_recv's loop sends and receives
#: different tensors, the halo convolutions exchange once, outside any loop).
APPLIES_IN_SUITE = {"context_parallel/cp_ring_attention.py", "context_parallel/cp_ring_attention_causal.py"}
SUITE = Path(find("cp_ring_attention").path).parents[1]

PARAMS = {"wrapper": "none", "rewrites": ["prefetch_exchange"]}


def _ring_source(name: str = "cp_ring_attention") -> str:
    return Path(find(name).path).read_text()


def _changed(before: str, after: str) -> tuple[list[str], list[str]]:
    """The lines removed and the lines added."""
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))[2:]
    return [d[1:] for d in diff if d.startswith("-")], [d[1:] for d in diff if d.startswith("+")]


# ---- which loops --------------------------------------------------------------------------------


def test_the_ring_loop_takes_the_prefetched_block_and_issues_the_next_one_and_nothing_else_changes():
    source = _ring_source()
    out, n = prefetch_exchange(source)
    assert n == 1
    assert _changed(source, out) == (
        ["        for step in range(dist.get_world_size()):", "                k, v = pass_along(k, v)"],
        [
            "        _kl_prefetch0 = _KloomPrefetch()",
            "        for step in _kl_prefetch0.ahead(range(dist.get_world_size())):",
            "                k, v = _kl_prefetch0.take(pass_along, k, v)",
            "            if _kl_prefetch0.more and (_kl_prefetch0.upcoming):",
            "                _kl_prefetch0.start(pass_along, k, v)",
        ],
    )
    # The next exchange is issued before this iteration's attention.
    assert out.index("_kl_prefetch0.start(") < out.index("block_out, block_lse = attention_with_lse(q, k, v)")


def test_both_ring_workloads_and_a_renamed_copy_are_rewritten():
    for name in RING:
        # The overlap strategy's ring rewrite serves the same loops (its exchange is a plain ring shift).
        assert source_rewrites(_ring_source(name)) == {"prefetch_exchange": 1, "overlap": 1}, name
    # Every name the rewrite could key on changed: module alias, function, state, loop variable.
    renamed = _ring_source("cp_ring_attention_causal").replace("import torch.distributed as dist", "from torch import distributed as tdist")
    for old, new in (("dist", "tdist"), ("pass_along", "rotate_blocks"), ("k", "keys"), ("v", "values"), ("step", "hop")):
        renamed = re.sub(rf"\b{old}\b", new, renamed)
    assert "pass_along" not in renamed and "dist." not in renamed.replace("tdist.", "")
    compile(renamed, "<renamed>", "exec")
    out, n = prefetch_exchange(renamed)
    assert n == 1
    assert "keys, values = _kl_prefetch0.take(rotate_blocks, keys, values)" in out
    assert "if _kl_prefetch0.more and (_kl_prefetch0.upcoming):\n                _kl_prefetch0.start(rotate_blocks, keys, values)" in out


def test_suite_files_it_applies_to_are_exactly_the_ring_loops():
    applies = set()
    for path in sorted(SUITE.rglob("*.py")):
        source = path.read_text()
        out, n = prefetch_exchange(source)
        if n:
            applies.add(str(path.relative_to(SUITE)))
            compile(out, str(path), "exec")
        else:
            assert out == source
    assert applies == APPLIES_IN_SUITE


_EXCHANGE = '''
import torch
import torch.distributed as dist


def rotate(k, v):
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


def helper(q, k):
    return q @ k.transpose(-1, -2)
'''


def _loop(body: str, exchange: str = _EXCHANGE) -> str:
    return exchange + "\n\ndef forward(q, k, v, skip=1):\n    out = 0\n" + textwrap.indent(textwrap.dedent(body), "    ") + "    return out\n"


@pytest.mark.parametrize(
    "body, why",
    [
        ("for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    k = k * 2\n    out = out + helper(q, k)\n", "the state is reassigned in the body"),
        ("for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    k.mul_(2)\n    out = out + helper(q, k)\n", "the state is modified in place"),
        ("for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    kk = k.view(-1)\n    kk.add_(1)\n    out = out + helper(q, k)\n", "a view of the state is modified in place"),
        ("for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    k[0] = 0\n    out = out + helper(q, k)\n", "the state is written through a subscript"),
        ("for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    torch.mul(q, 2, out=k)\n    out = out + helper(q, k)\n", "the state is an out= argument"),
        (
            "for i in range(4):\n    nk, nv = rotate(k, v)\n    out = out + helper(q, nk) + nv.sum()\n    k, v = nk, nv\n",
            "the exchange feeds this iteration's compute through other names",
        ),
        ("for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    k, v = rotate(k, v)\n    out = out + helper(q, k)\n", "two exchanges in one loop"),
        ("k, v = rotate(k, v)\nout = out + helper(q, k)\n", "no loop"),
        ("if q.numel():\n    k, v = rotate(k, v)\nout = out + helper(q, k)\n", "no loop, a guard"),
        ("for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    out = out + helper(q, k)\n    dist.all_reduce(out)\n", "other communication in the loop"),
        ("for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    out = out + helper(q, k)\n    if out.sum() > 0:\n        break\n", "an early exit"),
        ("for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    out = out + helper(q, k)\n    return out\n", "a return in the loop"),
        ("for i in range(4):\n    if i == skip:\n        continue\n    if i:\n        k, v = rotate(k, v)\n    out = out + helper(q, k)\n", "a continue before the exchange"),
        ("for i in range(4):\n    if k.numel() > i:\n        k, v = rotate(k, v)\n    out = out + helper(q, k)\n", "the guard reads the state and calls"),
        ("for i in range(4):\n    j = i - 1\n    if j:\n        k, v = rotate(k, v)\n    out = out + helper(q, k)\n", "the guard reads a name the loop assigns"),
        ("for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    else:\n        out = out + 1\n    out = out + helper(q, k)\n", "a guard with an else"),
        ("for i in [0, 1, 2]:\n    if i:\n        k, v = rotate(k, v)\n    out = out + helper(q, k)\n", "not a range"),
        ("for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    i = i + 1\n    out = out + helper(q, k)\n", "the loop variable is reassigned"),
        (
            "for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    for j in range(3):\n        pass\n    else:\n        break\n    out = out + helper(q, k)\n",
            "a break in an inner loop's else leaves this loop",
        ),
        ("for i in range(4):\n    if i:\n        k, v = rotate(v, k)\n    out = out + helper(q, k)\n", "the targets are not the arguments in order"),
    ],
)
def test_loops_it_must_leave_alone(body, why):
    source = _loop(body)
    compile(source, "<test>", "exec")
    assert prefetch_exchange(source) == (source, 0), why
    # (The overlap strategy would still route an all-reduce in the loop through its helper.)
    assert "prefetch_exchange" not in source_rewrites(source)
    with pytest.raises(NotApplicable):
        render(source + "\nclass Model:\n    pass\n", PARAMS, mutated_inputs=[], label="t")


def test_an_inner_loop_with_its_own_break_and_a_continue_after_the_exchange_are_fine():
    source = _loop(
        "for i in range(4):\n    if i > skip - 1:\n        k, v = rotate(k, v)\n    for j in range(3):\n        if j == i:\n            break\n"
        "    if i == skip:\n        continue\n    out = out + helper(q, k)\n"
    )
    out, n = prefetch_exchange(source)
    assert n == 1
    assert "        if _kl_prefetch0.more and (_kl_prefetch0.upcoming > skip - 1):\n            _kl_prefetch0.start(rotate, k, v)\n" in out


def test_a_function_that_receives_into_its_arguments_is_not_an_exchange():
    in_place = _EXCHANGE.replace("k_next, v_next = torch.empty_like(k), torch.empty_like(v)", "k_next, v_next = k, v")
    in_place = in_place.replace("dist.P2POp(dist.irecv, k_next", "dist.P2POp(dist.irecv, k").replace("dist.P2POp(dist.irecv, v_next", "dist.P2POp(dist.irecv, v")
    source = _loop("for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    out = out + helper(q, k)\n", in_place)
    assert prefetch_exchange(source)[1] == 0
    local = _loop("for i in range(4):\n    if i:\n        k, v = rotate(k, v)\n    out = out + helper(q, k)\n", _EXCHANGE.replace("dist.", "x."))
    assert prefetch_exchange(local)[1] == 0, "no torch.distributed call in it"


@pytest.mark.parametrize(
    "imports, exchange",
    [
        ("import torch.distributed as dist", "for r in dist.batch_isend_irecv([dist.P2POp(dist.isend, a, 1), dist.P2POp(dist.irecv, b, 1)]):\n        r.wait()"),
        ("from torch.distributed import batch_isend_irecv as bii, P2POp, isend, irecv", "for r in bii([P2POp(isend, a, 1), P2POp(irecv, b, 1)]):\n        r.wait()"),
        ("import torch", "torch.distributed.send(a, 1)\n    torch.distributed.recv(b, 0)"),
        ("from torch import distributed as d", "w = d.irecv(tensor=b, src=0)\n    d.send(a, 1)\n    w.wait()"),
    ],
)
def test_exchanges_are_found_under_every_alias(imports, exchange):
    source = f"{imports}\nimport torch\n\n\ndef hop(a):\n    b = torch.empty_like(a)\n    {exchange}\n    return b\n\n\ndef run(a, n):\n    acc = 0\n    for i in range(1, n):\n        a = hop(a)\n        acc = acc + a.sum()\n    return acc\n"
    out, n = prefetch_exchange(source)
    assert n == 1
    assert "a = _kl_prefetch0.take(hop, a)\n        if _kl_prefetch0.more:\n            _kl_prefetch0.start(hop, a)\n" in out


# ---- the rewritten loop computes what the reference does ----------------------------------------

_SIMULATED = '''
import torch.distributed as dist


def exchange(a):
    b = [None]
    dist.recv(b, a)
    return b


def run(n, skip, log):
    a = [0]
    for i in range(n):
        log.append(("pre", i, a[0]))
        if GUARD:
            a = exchange(a)
        log.append(("use", i, a[0]))
    return a[0]
'''


@pytest.mark.parametrize("guard", ["i", "i > 0", "i >= 2 and i < n - 1", "i % 2 == 1", "i != skip", "not i - skip", None])
def test_the_rewritten_loop_exchanges_for_the_same_iterations_and_uses_the_same_values(guard):
    """A simulated exchange (each one adds 1 and logs when it ran): the rewritten loop uses exactly
    the reference's values, runs the exchange for the same iterations, each one iteration early."""
    if guard is None:
        reference = _SIMULATED.replace("        if GUARD:\n            a = exchange(a)", "        a = exchange(a)")
    else:
        reference = _SIMULATED.replace("GUARD", guard)
    rewritten, count = prefetch_exchange(reference)
    assert count == 1

    def load(source):
        scope: dict = {}
        exec(compile(source + PREFETCH_HELPER, "<simulated>", "exec"), scope)
        log = []

        def recv(buffer, src):
            buffer[0] = src[0] + 1
            log.append(("exchange", src[0]))

        scope["dist"] = SimpleNamespace(recv=recv)
        return scope["run"], log

    for n in (0, 1, 2, 3, 6):
        for skip in (0, 1, 3):
            run_ref, log_ref = load(reference)
            run_new, log_new = load(rewritten)
            assert run_ref(n, skip, log_ref) == run_new(n, skip, log_new)
            assert [e for e in log_ref if e[0] != "exchange"] == [e for e in log_new if e[0] != "exchange"]
            assert [e for e in log_ref if e[0] == "exchange"] == [e for e in log_new if e[0] == "exchange"]
            # Each exchange that feeds iteration j > 0 ran before iteration j - 1 used its state.
            iteration, fed = -1, []
            for e in log_ref:
                iteration = e[1] if e[0] == "pre" else iteration
                if e[0] == "exchange":
                    fed.append(iteration)
            exchanges = [j for j, e in enumerate(log_new) if e[0] == "exchange"]
            for at, j in zip(exchanges, fed):
                if j > 0:
                    assert at < next(x for x, e in enumerate(log_new) if e[:2] == ("use", j - 1)), (n, skip, log_new)
            assert sum(1 for j in fed if j > 0) == 0 or log_new != log_ref, "the rewrite moved the exchanges"


def test_the_helper_runs_the_loop_one_element_ahead():
    scope = fresh_runtime("agents.strategist.prefetch.runtime")  # the module the candidate copies
    for items in ([], [7], [0, 1, 2, 3], list(range(2, 9, 3))):
        helper, seen = scope["_KloomPrefetch"](), []
        for x in helper.ahead(iter(items)):
            seen.append((x, helper.more, helper.upcoming))
        assert seen == [(x, j + 1 < len(items), items[j + 1] if j + 1 < len(items) else None) for j, x in enumerate(items)]
    helper = scope["_KloomPrefetch"]()
    state = (torch.ones(2),)
    helper.start(lambda t: (t + 1,), *state)
    with pytest.raises(RuntimeError):
        helper.start(lambda t: (t + 1,), *state)
    with pytest.raises(RuntimeError):
        helper.take(lambda t: (t + 1,), torch.ones(2))  # not the state the exchange was issued for


# ---- the strategist -----------------------------------------------------------------------------

#: The ring attention's analysis as measured on 4xH200 (results/gpu/h200x4-ws4-r2): compute-bound.
_MEASURED = dict(
    family="context_parallel", world_size=4, device="cuda", collectives=["recv", "send"], collective_sizes={}, ops=[],
    n_kernels=51, n_elementwise=35, n_matmul=0, n_attention=4, host_syncs=0, host_sync_ops=[], patterns=[], input_shapes=[],
    dtypes=["torch.bfloat16"], total_input_bytes=0, param_bytes=0, collective_bytes=0, mutated_inputs=[], output_shapes=[],
    dominant="compute", floor_ms=1.41, reference_ms=5.256,
    roofline_terms={"compute_ms": 1.4096, "hbm_ms": 0.0799, "link_ms": 0.5097},
)


def test_the_catalog_offers_it_first_for_a_compute_bound_ring_and_only_where_it_applies():
    options = options_for(Analysis(**_MEASURED, source_rewrites={"prefetch_exchange": 1}))
    assert options[0].strategy == "prefetch_exchange" and options[0].params == PARAMS
    ranked = [o.strategy for o in options]
    for generic in ("torch_compile", "cuda_graph", "compile_cuda_graph"):
        assert ranked.index("prefetch_exchange") < ranked.index(generic)
    assert not any(o.strategy.startswith("prefetch_exchange_") for o in options), "no compiled variant"
    assert "prefetch_exchange" not in {o.strategy for o in options_for(Analysis(**_MEASURED))}
    for other in (dict(_MEASURED, device="cpu"), dict(_MEASURED, world_size=1)):
        assert "prefetch_exchange" not in {o.strategy for o in options_for(Analysis(**other, source_rewrites={"prefetch_exchange": 1}))}


@pytest.mark.slow
def test_the_strategist_proposes_it_by_structure_not_name(evaluator, tmp_path):
    original = Path(find("cp_ring_attention").path)
    renamed = tmp_path / "something_else_entirely.py"
    shutil.copy(original, renamed)
    baseline = eval_records.baseline(5.256, roofline=eval_records.roofline("compute", 1.41, compute_ms=1.4096, hbm_ms=0.0799, link_ms=0.5097))
    plans = []
    for path in (original, renamed):
        traces = evaluator.analyze(path, world_size=2)
        analysis = build_analysis(traces, family="x", world_size=2, device="cuda", baseline=baseline)
        analysis.source_rewrites = source_rewrites(path.read_text())  # as the loop does
        plan, _ = OfflinePlanner().plan(planning_context(path, analysis))
        assert plan.strategy == "prefetch_exchange", (path.name, plan.strategy)
        plans.append((plan.strategy, plan.params))
        cpu = build_analysis(traces, family="x", world_size=2, device="cpu", baseline=baseline)
        cpu.source_rewrites = analysis.source_rewrites
        assert "prefetch_exchange" not in {o.strategy for o in options_for(cpu)}, "nothing to overlap without streams"
    assert plans[0] == plans[1]


# ---- the evaluator --------------------------------------------------------------------------------


def _candidate(tmp_path: Path, name: str, edit=None) -> tuple[Path, str]:
    path = Path(find(name).path)
    code = render(path.read_text(), PARAMS, mutated_inputs=[], label="prefetch_exchange")
    assert check_candidate(code) == []
    if edit is not None:
        old, new = edit
        assert old in code
        code = code.replace(old, new, 1)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(code)
    return path, candidate


@pytest.mark.slow
# Both rings at world size 2; CI runs the first at world size 4 (tests/sweeps.py).
@pytest.mark.parametrize(("name", "world_size"), [(n, 2) for n in RING] + sweeps.params([(n, 4) for n in RING], every=2))
def test_a_rewritten_ring_is_correct_on_every_rank(evaluator, tmp_path, name, world_size):
    path, candidate = _candidate(tmp_path, name)
    result = evaluator.evaluate(path, candidate, world_size=world_size)
    assert result.status == "correct", result.error
    assert len(result.trials) >= 5 and all(t.ok for t in result.trials)


_TAKE = "            if step:\n                k, v = _kl_prefetch0.take(pass_along, k, v)\n"
_START = "            if _kl_prefetch0.more and (_kl_prefetch0.upcoming):\n                _kl_prefetch0.start(pass_along, k, v)\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, edit, why",
    [
        ("cp_ring_attention_causal", (_TAKE, _TAKE.replace("if step:", "if True:")), "the guard skipped: one exchange too many"),
        (
            "cp_ring_attention",
            (_TAKE + _START + "            block_out, block_lse = attention_with_lse(q, k, v)\n", "            block_out, block_lse = attention_with_lse(q, k, v)\n" + _TAKE + _START),
            "the block taken one iteration late",
        ),
    ],
)
def test_a_wrong_prefetch_would_be_caught(evaluator, tmp_path, name, edit, why):
    """Control: a prefetch that exchanges for the wrong iterations, or whose result reaches the
    compute one iteration late, is judged incorrect; the analysis above is what keeps them out."""
    path, candidate = _candidate(tmp_path, name, edit)
    result = evaluator.evaluate(path, candidate, world_size=4)
    assert result.status == "incorrect", why


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_a_rewritten_ring_is_correct_on_cuda(tmp_path):
    """On CUDA the exchange runs on a side stream, overlapped with the previous block's attention."""
    path, candidate = _candidate(tmp_path, "cp_ring_attention")
    with Evaluator("cuda", EvalSettings.for_device("cuda", timing_budget_s=0.5)) as ev:
        result = ev.evaluate(path, candidate, world_size=2)
    assert result.status == "correct", result.error
    assert len(result.trials) >= 5 and all(t.ok for t in result.trials)
