"""Max-autotune: offered for products and convolutions on a GPU, after a winning default compile
where there is one, with candidates the static checker accepts and that hand back owned outputs
when CUDA graphs reuse theirs."""

import torch

from agents.analysis import build_analysis
from agents.strategist.catalog import options_for
from agents.strategist.codegen import render
from kloom.static_check import check_candidate
from services.worker.evaluator.tracing import trace_call

GEMM_ONLY = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(16, 8), torch.randn(8, 12)]


def get_init_inputs():
    return []
'''

GEMM_CHAIN = GEMM_ONLY.replace("return torch.matmul(a, b)", "return torch.tanh(torch.relu(torch.matmul(a, b)) * 2.0)")


def _analysis(source: str, device: str = "cuda"):
    ns: dict = {}
    exec(compile(source, "<reference>", "exec"), ns)  # the test's own reference
    model, inputs = ns["Model"](*ns["get_init_inputs"]()), ns["get_inputs"]()
    trace = trace_call(model, inputs)
    # What the evaluator's ranks add to a trace (``rank.cmd_analyze``).
    trace.update(
        input_shapes=[list(x.shape) for x in inputs], input_dtypes=[str(x.dtype).replace("torch.", "") for x in inputs],
        input_bytes=sum(x.numel() * x.element_size() for x in inputs), param_bytes=0, mutated_inputs=[], roofline=None,
    )
    return build_analysis([trace], family="x", world_size=1, device=device, baseline=None)


def test_a_product_alone_gets_the_search_on_its_own():
    found = {o.strategy: o for o in options_for(_analysis(GEMM_ONLY))}
    search = found["compile_max_autotune"]
    assert search.base is None and search.params["compile_mode"] == "max-autotune-no-cudagraphs"
    assert "compilation" in search.rationale and "wall time" in search.rationale
    assert found["compile_max_autotune_graph"].base == "compile_max_autotune"
    assert found["compile_coordinate_descent"].params["compile_options"] == {"max_autotune": True, "coordinate_descent_tuning": True}
    assert not any(o.strategy.startswith("compile_max") for o in options_for(_analysis(GEMM_ONLY, "cpu")))


def test_with_elementwise_work_the_search_refines_a_winning_default_compile():
    found = {o.strategy: o for o in options_for(_analysis(GEMM_CHAIN))}
    assert found["compile_max_autotune"].base == "torch_compile"
    assert found["compile_max_autotune"].score < found["torch_compile"].score


def test_candidates_pass_the_checker_and_graph_modes_clone_their_outputs():
    for option in options_for(_analysis(GEMM_CHAIN)):
        if not option.strategy.startswith("compile_"):
            continue
        source = render(GEMM_CHAIN, option.params, mutated_inputs=[], label=option.strategy)
        assert check_candidate(source) == [], option.strategy
        if option.params.get("compile_mode") == "max-autotune":
            assert "t.clone()" in source  # cudagraph trees reuse output buffers on the next call
    assert torch.backends.cuda.matmul.allow_tf32 is False


def test_the_rationale_says_how_much_of_the_step_the_products_are():
    from agents.strategist.dominance import dominance

    analysis = _analysis(GEMM_CHAIN)
    share = dominance(analysis.op_graph)
    assert 0.0 < share.products < 1.0 and share.convolutions == 0.0
    search = next(o for o in options_for(analysis) if o.strategy == "compile_max_autotune")
    assert f"~{100 * share.products:.0f}% of its roofline time" in search.rationale
