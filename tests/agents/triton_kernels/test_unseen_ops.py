"""Problems of kinds kloom's templates were not tuned on (``unseen/problems``: products with
transposed or diagonal factors, activations, norms written by hand, reductions and scans over
every axis, losses, pools and convolutions with strides, groups and dilations, chains of them,
and whole networks), planned with every kind forced and their candidates run on the CPU in
Triton's interpreter against the reference at the judge's tolerance (``unseen/probe.py``; it
runs all of them as a script). Each bug the probe found has a test of its own below."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from agents.strategist.triton_kernels.chains import follow
from agents.strategist.triton_kernels.emit import candidate_source
from agents.strategist.triton_kernels.plan import find_matches
from agents.strategist.triton_kernels.templates import GraphView, Match, MatchError, RegionCost, check_match
from kernels.elementwise.opcodes import EW_OPS
from kloom.opgraph import OpGraph
from services.worker.evaluator.tracing import trace_call


def _load_probe():
    path = Path(__file__).resolve().parent / "unseen" / "probe.py"
    spec = importlib.util.spec_from_file_location("_kl_unseen_probe", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


probe = _load_probe()


def _outcomes(name: str) -> list:
    """Every distinct plan of the problem, run (the planner's and candidate's errors recorded)."""
    path = probe.PROBLEMS / f"{name}.py"
    assert path.is_file(), path
    found, seen = [], None
    for plan in probe.PLANS:
        outcome = probe.probe(path, plan, seen)
        if outcome is not None:
            found.append(outcome)
            seen = outcome.regions
    return found


def _assert_correct(name: str) -> list:
    """The problem's plans: the first (every template) has regions; each computes the reference
    (a later plan, without the kinds that claim first, may find no region: a triangle of a
    product is the triangular kind's alone)."""
    outcomes = _outcomes(name)
    assert outcomes[0].status == "ok" and outcomes[0].regions, outcomes[0].line()
    for outcome in outcomes[1:]:
        assert outcome.status in ("ok", "nothing"), outcome.line()
    return outcomes


#: A sample of the probe's problems the templates take (a region each at least), one or two of
#: each family and a few whole networks (``n_*``); the script runs all of them.
SAMPLE = [
    "mm_diag", "mm_matvec", "mm_transposed_both", "mm_3d_tensor_matrix", "mm_triu", "mm_batched", "mm_bf16_scale_residual",
    "y_tril_rect", "y_gemm_row_ops", "y_gemm_col_and_transposed_operands", "z_addmm_full_bias",
    "act_softsign", "act_hardsigmoid", "sm_log_middle", "sm_dim0", "x_softmax_transposed_input", "y_softmax_masked",
    "norm_rms_by_hand", "norm_layer_last3", "norm_l1", "norm_frobenius", "x_groupnorm_5d", "x_batchnorm1d_2d",
    "red_prod_dim1", "red_argmin_dim0", "red_max_dim2_both", "red_sum_dim0_bf16", "x_argmax_all_large", "x_reduce_multi_dims",
    "scan_cumprod", "scan_exclusive_cumsum", "scan_reverse_cumsum", "x_scan_reverse_middle",
    "loss_mse", "loss_kl_div", "loss_hinge", "loss_cosine", "y_cross_entropy_ignore",
    "pool_max1d", "pool_avg2d", "x_maxpool2d_ceil", "x_avgpool2d_ceil_pad",
    "conv2d_grouped_dilated", "conv2d_asym", "convT1d", "convT2d_grouped", "y_conv1d_depthwise_mult", "y_conv_channels_last",
    "l2_conv_bn_relu_eval", "l2_linear_groupnorm_hardswish", "l2_convT_gap_lse_mul", "l2_linear_sum_max", "l2_broadcast_params",
    "v_gemm_max_sub_mean_gelu", "v_conv_sub_hardswish_pool_mish", "w_attention_by_hand",
    "n_mlp_deep", "n_rmsnorm_swiglu", "n_swin_patch_merging", "n_dense_mlp_concat", "n_gru_cell_by_hand", "n_resnet_basic_eval",
    "n_channels_last_resnet",
]  # fmt: skip


@pytest.mark.parametrize("name", SAMPLE)
def test_unseen_problems_are_planned_and_their_candidates_compute_the_reference(interpret, name):
    _assert_correct(name)


def test_an_alias_of_a_buffer_stays_a_view_and_is_not_replaced_by_fresh_memory(interpret):
    """InstanceNorm tracking running statistics in training: its running mean's ``alias`` is
    written by a ``copy_`` after it. A chain that computed the alias as a fresh tensor cut it from
    the buffer, and the running statistics stayed as they were (every element off)."""
    (outcome,) = _assert_correct("x_instancenorm_running")
    assert not any("alias" in r for r in outcome.regions), outcome.regions
    assert "copy_" in outcome.left


@pytest.mark.parametrize(
    "name",
    [
        "x_gelu_tanh_bf16",  # a chain: bf16 GELU, then .float()
        "y_bf16_tanh_times_f32",  # a bf16 value times a float32 parameter
        "y_fp16_cast_chain",  # float16 arithmetic, to bfloat16, to float32
        "y_bf16_sum_to_float",  # a reduction's result widened in its epilogue
        "u_mean_bf16_split",  # the same after the split axis's partials
        "y_bf16_softmax_to_float",
        "y_bf16_layernorm_to_float",
        "y_bf16_linear_to_float",  # a bf16 product's epilogue
        "w_gemm_bf16_bias_residual_float",
        "n_autocast_bf16_mlp",  # bf16 regions' stored results widened by the next region (the store truncated)
    ],
)
def test_low_precision_values_are_rounded_as_the_reference_rounds_them_before_a_chain_widens_them(interpret, name):
    """A program holds values in float32; the reference rounds each bf16/fp16 result. Widened to
    float32, the unrounded values were off by up to a bf16 ulp, far outside float32's tolerance."""
    _assert_correct(name)


def test_chains_that_stay_in_one_low_precision_dtype_keep_their_programs():
    """The rounding is added only where a chain widens a low-precision value: a bf16 chain whose
    result is bf16 (the kind measured on the GPU) runs the program it ran before."""
    rounding = {EW_OPS["round_bf16"].code, EW_OPS["round_fp16"].code}

    def program(fn, x):
        graph = OpGraph.from_dict(trace_call(fn, [x])["op_graph"])
        chain = follow(GraphView(graph), graph.inputs[0]["tensor"], operands=(graph.inputs[0]["tensor"],), owned=False)
        return set(chain.program[::4])

    x = torch.randn(4, 8, dtype=torch.bfloat16)
    assert not program(lambda t: torch.sigmoid(t) * 2.0 + 1.0, x) & rounding
    assert program(lambda t: (torch.sigmoid(t) * 2.0).float() + 1.0, x) & rounding


@pytest.mark.parametrize("name", ["z_argmax_bf16_prologue", "z_max_indices_fp16_prologue"])
def test_an_index_picked_from_low_precision_values_sees_them_rounded(interpret, name):
    """An argmax (or max with indices) over a bf16/fp16 chain fused before it: rounding makes ties
    the reference resolves to the first index; the unrounded float32 values picked others."""
    _assert_correct(name)


@pytest.mark.parametrize(
    "name, left",
    [("z_sum_of_scalar", ["sum"]), ("z_softmax_of_scalar", ["_softmax", "cumsum"]), ("z_empty_reduction", ["sum"])],
)
def test_zero_dim_and_empty_tensors_the_kernels_refuse_are_left_to_torch(interpret, name, left):
    """The reduction, scan and softmax launchers raise ``KernelUnsupported`` for a 0-d tensor (the
    reduction for an empty one too): the templates matched them, and the candidate failed."""
    (outcome,) = _assert_correct(name)
    assert outcome.left == left


def test_celu_is_an_elu_in_the_chain(interpret):
    """CELU was left out of the elementwise chain (it is an ELU of input scale 1 / alpha)."""
    (outcome,) = _assert_correct("x_activations_misc")
    assert outcome.left == [] and "celu" in outcome.regions[0]


@pytest.mark.parametrize("compile_mode", [None, "default"])
def test_a_region_output_the_trace_saw_in_another_layout_keeps_that_layout(interpret, compile_mode):
    """nn.MultiheadAttention reads the attention's output, which PyTorch's kernels lay out as
    (length, batch, heads, depth), through a permute, a ``contiguous()`` that copied nothing (so is
    not in the trace) and a ``view``: the attention kernel wrote it row-major, and the replayed
    ``view`` raised. The compiled replay's region must return the traced layout too: its fake
    result says so, and inductor reads the real one as the fake's."""
    path = probe.PROBLEMS / "n_mha_post_norm.py"
    problem = probe.load(path)
    graph = probe.trace(problem)
    found = find_matches(graph, None, wins={}, force=probe.EVERY_KIND)
    attention = next(m for m in found.matches if m.kind == "attention_fp32x3")
    assert not graph.tensors[attention.outputs[0]].contiguous
    source = candidate_source(path.read_text(), graph, found.matches, "test", compile_mode)
    assert probe.check_candidate(problem, probe.candidate_module(path, source, f"layout_{compile_mode}"), seeds=(2,)) == ""


def test_a_region_ends_before_a_write_in_place_to_memory_it_read(interpret):
    """``t = tanh(h); h.mul_(0.5); t + h + x``: the chain tanh, add, add passed the in-place
    ``mul_`` by and ran at its last node, so its tanh read the halved ``h`` (every element off).
    A chain now ends where memory it read is written, and ``check_match`` refuses any region whose
    statement would read memory written in place after a node of the region read it. (``h`` is
    the product's own output, which no one else sees: the write joins the product's epilogue,
    in order, since in-place writes into a region's output do.)"""
    outcomes = _assert_correct("n_inplace_between_chain")
    assert outcomes[0].regions == ["gemm_fp32x3:addmm,tanh,mul_,add,add"], outcomes[0].regions
    graph = probe.trace(probe.load(probe.PROBLEMS / "n_inplace_between_chain.py"))
    across = frozenset(n.index for n in graph.nodes if n.op in ("aten::tanh", "aten::add"))
    match = Match("t", "elementwise", across, (graph.nodes[max(across)].outputs[0],), (), lambda names: [], RegionCost(0), "")
    with pytest.raises(MatchError, match="writes in place memory that node"):
        check_match(GraphView(graph), match)


def test_a_region_ends_before_a_read_of_the_running_statistics_its_batch_norm_updates(interpret):
    """A training BatchNorm's running mean read between the norm and the ReLU after it: the
    region (norm and ReLU) ran at the ReLU, after the read, which saw the statistics not updated
    yet. ``native_batch_norm``'s schema does not mark them written, so the trace records no write
    (``OpNode.written`` names them); the epilogue now ends before the read, and ``check_match``
    refuses a region that would move the update past it."""
    (outcome,) = _assert_correct("n_bn_stats_read_between")
    assert "batch_norm:native_batch_norm" in outcome.regions, outcome.regions
    graph = probe.trace(probe.load(probe.PROBLEMS / "n_bn_stats_read_between.py"))
    across = frozenset(n.index for n in graph.nodes if n.op in ("aten::native_batch_norm", "aten::relu"))
    match = Match("t", "batch_norm", across, (graph.nodes[max(across)].outputs[0],), (), lambda names: [], RegionCost(0), "")
    with pytest.raises(MatchError, match="reads tensor .* after node .* wrote its memory"):
        check_match(GraphView(graph), match)


def test_a_training_batch_norm_whose_output_nothing_reads_is_still_replayed(interpret, monkeypatch):
    """A BatchNorm run only for its running statistics, left to torch (its kind measured slower,
    here: not offered): the replay dropped it as an operator nothing reads, and the statistics
    stayed as they were (the trace records no write for them)."""
    monkeypatch.setitem(probe.PLANS, "gemm", ["gemm_fp32_epilogue"])
    outcome = probe.probe(probe.PROBLEMS / "n_bn_tracking_side_branch.py", "gemm")
    assert outcome.status == "ok" and "native_batch_norm" in outcome.left, outcome.line()


def test_in_place_activations_and_adds_into_a_regions_own_output_join_its_epilogue(interpret):
    """``relu_`` after a norm (ResNet's ReLU(inplace=True)), ``out += identity``, ``mul_`` and
    ``add_`` of a value read before the write: they write memory only the region's kernel makes,
    so they join its epilogue (they were left to torch, one more pass over the activations each).
    A view taken before the write, and a write into an operand, stay with torch."""
    (block,) = [o for o in _outcomes("n_resnet_basic_eval") if o.plan == "all"]
    assert block.status == "ok" and "batch_norm:native_batch_norm,relu_" in block.regions, block.line()
    assert "batch_norm:native_batch_norm,add_,relu_" in block.regions, block.line()
    for outcome in _assert_correct("n_inplace_epilogues"):
        assert "batch_norm:native_batch_norm,mul,relu_,mul_,add_,add_" in outcome.regions, outcome.line()
        assert any(r.endswith(":addmm,hardtanh_") for r in outcome.regions), outcome.line()
        assert "batch_norm:native_batch_norm" in outcome.regions and "relu_" in outcome.left, outcome.line()
        assert outcome.left.count("add_") == 3, outcome.line()  # two batch counters and h.add_(g)


def test_attentions_scale_and_mask_are_the_softmaxs_prologue(interpret):
    """MinGPT's ``(q @ k.T) * scale``, ``masked_fill(mask == 0, -inf)``, softmax: the scale and the
    fill run on the values the softmax loads (two passes over the scores fewer); a fill with NaN
    or with a value held in a tensor stays with torch (the chain's fill passes through a NaN)."""
    for outcome in _assert_correct("n_mingpt_block"):
        assert "softmax:mul,masked_fill,_softmax" in outcome.regions, outcome.line()
    (outcome,) = _assert_correct("n_masked_fill_kinds")
    assert "softmax:_to_copy,mul,masked_fill,_softmax" in outcome.regions, outcome.line()
    assert "elementwise:tanh,masked_fill_" in outcome.regions and "elementwise:mul,abs,lt,masked_fill" in outcome.regions, outcome.line()
    assert outcome.left.count("masked_fill") == 2, outcome.line()


def test_elementwise_branches_that_meet_are_one_kernel(interpret):
    """``tanh(a) * sigmoid(b)`` (WaveNet's and the LSTM cell's gates): the sigmoid, read only by
    the product, is computed in the chain's kernel from ``b`` loaded as an operand (it was a kernel
    of its own, one more write and read of the activations), a side branch of two ops too, and a
    per-channel one. A side value read twice, returned, or made before its input is written in
    place stays a kernel of its own, loaded by the chain."""
    for outcome in _assert_correct("n_side_branches"):
        assert "elementwise:tanh,sigmoid,mul,exp,mul,add,sigmoid,add,sigmoid,mul" in outcome.regions, outcome.line()
        assert "elementwise:tanh,mul,add,relu,mul" in outcome.regions, outcome.line()  # tanh(e) read twice: the chain's own start
        assert "elementwise:sigmoid" in outcome.regions, outcome.line()  # sigmoid(c) before c.mul_
        assert "elementwise:mul,sigmoid" in outcome.regions and "elementwise:abs,add" in outcome.regions, outcome.line()  # r returned
    (outcome,) = _assert_correct("n_side_branch_operands")  # five loads would not fit: loaded, the chain kept whole
    assert outcome.regions == ["elementwise:relu,mul,add", "elementwise:mul,mul,add"], outcome.line()
    for outcome in _assert_correct("n_lstm_cell_by_hand"):
        assert "elementwise:sigmoid,sigmoid,tanh,mul,mul,add" in outcome.regions, outcome.line()
        assert not any(r.endswith((":tanh", ":sigmoid")) for r in outcome.regions), outcome.line()
