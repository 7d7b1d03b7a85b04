"""Templates: a product (``mm``/``bmm``/``addmm``) with what follows it, as one GEMM kernel
(``kernels/gemm/matmul.py``: ``gemm``), and a convolution with its epilogue as one implicit GEMM
(``kernels/conv/implicit_gemm.py``: ``conv_forward``).

A GEMM region is the product, then a ``tril``/``triu`` of it, then the elementwise chain that
follows (``chains.follow``; an ``addmm``'s bias is the chain's first step), then a softmax or
log-softmax over its rows (when a row fits one tile) or a reduction of its rows (sum, mean,
amax, amin, logsumexp). A convolution region is the convolution and its chain.

What the kernels save differs by kind, and so does whether they beat cuBLAS/cuDNN and inductor:

- ``gemm_triangular``: a triangle of a product skips the tiles outside it, and triangular factors
  (checked on the device) the K ranges where they hold zeros: less work, whatever the hardware.
  Offered before it is measured;
- ``gemm_fp32``, ``gemm_lowp`` (bfloat16/float16), ``conv_fp32``, ``conv_transposed_fp32``,
  ``conv_lowp``: the same arithmetic as cuBLAS/cuDNN with fewer passes over memory for the
  epilogue. Float32 products run on CUDA cores in full precision (no TF32), where cuBLAS's SGEMM
  is hard to beat, so these are offered only where ``benchmarks/gpu/gemm_conv.py`` measured a win
  (``offered_unmeasured = False``);
- ``gemm_fp32x3``: a float32 product on the tensor cores as three TF32 products (``hi*hi + hi*lo
  + lo*hi``, ``kernels.gemm.tiles.GEMM_PRECISIONS``), whose error against float64 is at or below
  cuBLAS's SGEMM (``benchmarks/gpu/fp32x3_probe.py``), not TF32's: the judge's float32 bound holds
  and no precision flag changes. Offered once ``kernels/gemm/bench_gemm.py`` measured it winning;
- ``conv_fp32x3``, ``conv_transposed_fp32x3``: a float32 convolution, plain or transposed (at least
  ``TAPS_MIN_CHANNELS`` input channels a group), as ``kernels/conv/tap_gemm.py``'s implicit GEMM,
  tap by tap (a transposed one split by output phase), in the same three TF32 products. Offered
  once ``kernels/conv/bench_conv.py`` (patterns ``taps``) measured them winning;
- ``conv_folded_fp32x3``: a plain float32 convolution with fewer input channels a group than
  that (an image's 3, a stem's 8), as ``kernels/conv/folded.py``'s implicit GEMM over the whole
  window at once (channels x taps, at most ``FOLDED_MAX_K``; at least ``FOLDED_MIN_OUT_CHANNELS``
  output channels a group, so not depthwise), in the same three TF32 products.
  Offered once ``bench_conv.py`` (patterns ``folded``) measured it winning;
- ``conv_transposed_folded_fp32x3``: a transposed float32 convolution with as few input channels a
  group, as ``kernels/conv/folded_transposed.py``'s implicit GEMM per output phase over every
  (channel, tap) pair that reaches it (at least ``FOLDED_MIN_OUT_CHANNELS`` output channels a
  group), in the same three TF32 products. Offered once ``bench_conv.py`` (patterns ``folded
  transposed``) measured it winning;
- ``conv_depthwise``: a depthwise convolution (one input channel a group) of any of the kernel
  dtypes, as ``kernels/conv/depthwise.py``'s direct multiply-adds on the CUDA cores, memory-bound
  work cuDNN does far above its floor. Offered once ``bench_conv.py`` (patterns ``depthwise``)
  measured it winning.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from kernels.elementwise.opcodes import EW_OPERAND, EW_OPS
from kloom.opgraph import decode_float, int_list

from .chains import Chain, follow, scalars_code
from .templates import GraphView, Match, RegionCost, nbytes, register

GEMM_MODULE = "kernels.gemm.matmul"
CONV_MODULE = "kernels.conv.implicit_gemm"
TAPS_MODULE = "kernels.conv.tap_gemm"
FOLDED_MODULE = "kernels.conv.folded"
FOLDED_TRANSPOSED_MODULE = "kernels.conv.folded_transposed"
DEPTHWISE_MODULE = "kernels.conv.depthwise"
#: The most taps the depthwise kernel unrolls (``kernels.conv.depthwise.DEPTHWISE_MAX_TAPS``).
DEPTHWISE_MAX_TAPS = 256
#: The widest window (input channels of a group x taps) the folded kernel unrolls (``kernels.conv.folded.FOLDED_MAX_K``).
FOLDED_MAX_K = 512
#: The fewest output channels a group may have for it: a tile's columns are a group's output
#: channels, at least 16 wide on the tensor cores, so a depthwise convolution (one a group) would
#: spend 15 of 16 products on padding; it was measured with 16 to 64.
FOLDED_MIN_OUT_CHANNELS = 16
#: The fewest input channels a group may have for the tap-outer kernel: its channel step is at
#: least 16 (the tensor cores'), so fewer channels leave most of each product padding. Measured on
#: an H100 (results/gpu/h100-session32/): 3x3, 16 -> 128 channels 1.14x cuDNN, 8 -> 64 0.65x.
TAPS_MIN_CHANNELS = 16
#: The widest row a softmax after the product may have (``kernels.gemm.matmul.GEMM_MAX_ROW_TILE``).
MAX_ROW_TILE = 1024
#: Row operators the GEMM finishes in its tile, by aten name.
ROW_OPS = {"aten::_softmax": "softmax", "aten::_log_softmax": "log_softmax"}
REDUCTIONS = {"aten::sum": "sum", "aten::mean": "mean", "aten::amax": "max", "aten::amin": "min", "aten::logsumexp": "logsumexp"}
KERNEL_DTYPES = ("float32", "bfloat16", "float16")
#: How a float32 product is multiplied, by kind, as rationales say it.
FP32_HOW = {
    "gemm_fp32": " (full float32 on CUDA cores, no TF32)",
    "gemm_fp32x3": " (float32 on the tensor cores as three TF32 products carrying each operand's rounding error: float32's accuracy, no TF32 rounding)",
}
#: How a float32 convolution kernel of a ``*_fp32x3`` kind multiplies, as rationales say it.
CONV_X3_HOW = "on the tensor cores as three TF32 products carrying each operand's rounding error (float32's accuracy, no TF32 rounding), with its bias"
#: How much faster than cuBLAS's float32 SGEMM three TF32 products run, for the roofline of a
#: ``gemm_fp32x3`` region: 1.51-1.89x on the H100 on KernelBench's product shapes
#: (``results/gpu/h100-session31/call2/probe``), the lower end of that taken.
FP32X3_SPEEDUP = 1.5
#: The first step of an ``addmm``'s chain: ``x + bias`` with the bias as operand 0.
_ADD_BIAS = (EW_OPS["add"].code, 0, 0, EW_OPERAND)


def _chain_post(chain: Chain | None, read, prefix: tuple = (), loaded: tuple = ()) -> str:
    """The ``post`` argument for a chain (``prefix`` steps run before it, reading ``loaded``
    operands that the chain's own operands start with)."""
    if chain is None and not prefix:
        return "None"
    program = prefix + (chain.program if chain else ())
    operands = chain.operands if chain else loaded
    scalars = chain.scalars if chain else ()
    return f"([{', '.join(read(t) for t in operands)}], {program!r}, {scalars_code(scalars)})"


class _KindTemplate:
    """A template whose regions start at one of ``ops`` and are claimed for one kind (the
    region's kind decides which of the kind templates takes it)."""

    ops: tuple[str, ...] = ()

    def __init__(self, kind: str, priority: int, offered_unmeasured: bool):
        self.name = f"{kind}_epilogue"
        self.kind = kind
        self.priority = priority
        self.offered_unmeasured = offered_unmeasured

    def match(self, view: GraphView) -> Iterator[Match]:
        for node in view.graph.nodes:
            if not view.free(node.index) or node.op not in self.ops:
                continue
            match = self._region(view, node)
            if match is not None and match.kind == self.kind:
                yield match
                view = view.with_claimed(match.nodes)

    def _region(self, view: GraphView, node) -> Match | None:
        raise NotImplementedError


class GemmEpilogue(_KindTemplate):
    """Claims ``mm``/``bmm``/``addmm`` nodes with their triangle, chain and row op."""

    ops = ("aten::mm", "aten::bmm", "aten::addmm")

    def _region(self, view: GraphView, node) -> Match | None:
        if node.op == "aten::addmm":
            bias, a, b = (node.arg(n) for n in ("self", "mat1", "mat2"))
            if decode_float(node.arg("beta", 1)) != 1 or decode_float(node.arg("alpha", 1)) != 1:
                return None
        else:
            bias, a, b = None, node.arg("self"), node.arg("mat2")
        if not all(isinstance(v, dict) and "tensor" in v for v in (a, b)):
            return None
        a, b = a["tensor"], b["tensor"]
        dtype = view.tensor(a).dtype
        if dtype not in KERNEL_DTYPES or view.tensor(b).dtype != dtype:
            return None
        nodes = [node.index]
        out = node.outputs[0]
        tri = ""
        user = view.only_user(out)
        if bias is None and user is not None and view.free(user) and view.node(user).op in ("aten::tril", "aten::triu"):
            diag = view.node(user).arg("diagonal", 0)
            if isinstance(diag, int):
                tri = f", {'tril' if view.node(user).op == 'aten::tril' else 'triu'}={diag}" + (", triangular_inputs=True" if diag == 0 else "")
                nodes.append(user)
                out = view.node(user).outputs[0]
        loaded = (bias["tensor"],) if isinstance(bias, dict) else ()
        if bias is not None and not loaded:
            return None  # a scalar bias: not an addmm the program reads
        chain = follow(view.with_claimed(frozenset(nodes)), out, operands=loaded)
        if chain is not None:
            nodes += sorted(chain.nodes)
            out = chain.output
        finish, final, keepdim = self._row(view, out)
        if finish:
            nodes.append(view.producer[final])
        region_dtype = view.tensor(final).dtype
        if region_dtype not in KERNEL_DTYPES:
            return None
        shape_a, shape_b = view.tensor(a).shape, view.tensor(b).shape
        m, k, n = shape_a[-2], shape_a[-1], shape_b[-1]
        batch = math.prod(view.tensor(node.outputs[0]).shape[:-2])
        kind = "gemm_triangular" if tri else ("gemm_fp32" if dtype == "float32" else "gemm_lowp")
        if kind == "gemm_fp32" and self.kind == "gemm_fp32x3":
            kind = "gemm_fp32x3"
        precision = ', precision="tf32x3"' if kind == "gemm_fp32x3" else ""
        flops = 2 * batch * m * n * k // (6 if "triangular_inputs" in tri else 2 if tri else 1)
        post_prefix = _ADD_BIAS if loaded else ()
        reads = (a, b) + (chain.operands if chain else loaded)
        rate = RegionCost.tflops * (FP32X3_SPEEDUP if kind == "gemm_fp32x3" else 1.0)
        cost = RegionCost(bytes=sum(nbytes(view.tensor(t)) for t in dict.fromkeys(reads)) + nbytes(view.tensor(final)), flops=flops, tflops=rate)
        ops = len(chain.nodes) if chain else 0
        why = self._why(kind, tri, batch, m, n, k, dtype, ops + bool(loaded), finish)
        return Match(
            template=self.name,
            kind=kind,
            nodes=frozenset(nodes),
            outputs=(final,),
            modules=(GEMM_MODULE,),
            emit=lambda names: [
                f"{names.define(final)} = gemm({names.read(a)}, {names.read(b)}, {_chain_post(chain, names.read, post_prefix, loaded)}"
                f"{tri}{finish}, out_dtype=torch.{region_dtype}{precision})" + (".unsqueeze(-1)" if keepdim else "")
            ],
            cost=cost,
            rationale=why,
            params={"kind": kind, "m": m, "n": n, "k": k, "batch": batch, "epilogue_ops": ops, "finish": finish.strip(", ")},
        )

    @staticmethod
    def _row(view: GraphView, out: int) -> tuple[str, int, bool]:
        """A softmax or row reduction the tile can finish: (its keyword argument, its output,
        whether the reduced dimension is kept)."""
        user = view.only_user(out)
        if user is None or not view.free(user):
            return "", out, False
        node = view.node(user)
        shape = view.tensor(out).shape
        last = len(shape) - 1
        if node.op in ROW_OPS:
            dim = node.arg("dim")
            if isinstance(dim, int) and dim in (-1, last) and not node.arg("half_to_float") and shape[-1] <= MAX_ROW_TILE:
                return f", row={ROW_OPS[node.op]!r}", node.outputs[0], False
        if node.op in REDUCTIONS and node.overload in ("", "dim_IntList", "dim"):
            dims = int_list(node.arg("dim"))
            if dims in ([-1], [last]) and node.arg("dtype") is None and view.tensor(node.outputs[0]).dtype in KERNEL_DTYPES:
                return f", reduce={REDUCTIONS[node.op]!r}", node.outputs[0], bool(node.arg("keepdim"))
        return "", out, False

    @staticmethod
    def _why(kind: str, tri: str, batch: int, m: int, n: int, k: int, dtype: str, ops: int, finish: str) -> str:
        shape = f"{'%d x ' % batch if batch > 1 else ''}{m}x{k} @ {k}x{n} {dtype}"
        what = f"GEMM {shape}" + (FP32_HOW.get(kind, "") if dtype == "float32" else "")
        if tri:
            return (
                f"{what} of which only a triangle is kept: tiles outside it skip their K loop"
                + (", and triangular factors (checked on the device) only their overlapping K range (a sixth of the work)" if "triangular_inputs" in tri else "")
            )
        done = f"{ops} epilogue op(s)" + (f" and the row {finish.split('=')[1].strip(chr(39))}" if finish else "")
        return f"{what} with {done} applied in registers before its one store (no pass over the product per op)"


def _out_channels_g(view: GraphView, weight: int, groups: int, transposed: bool) -> int:
    """A convolution's output channels a group (a plain one's weight is ``(C_out, C_in / groups,
    k...)``, a transposed one's ``(C_in, C_out / groups, k...)``)."""
    return view.tensor(weight).shape[1] if transposed else view.tensor(weight).shape[0] // groups


class ConvEpilogue(_KindTemplate):
    """Claims ``convolution`` nodes with the elementwise chain after them."""

    ops = ("aten::convolution",)

    def _region(self, view: GraphView, node) -> Match | None:
        x, w, bias = node.arg("input"), node.arg("weight"), node.arg("bias")
        if not (isinstance(x, dict) and "tensor" in x and isinstance(w, dict) and "tensor" in w):
            return None
        x, w = x["tensor"], w["tensor"]
        dtype = view.tensor(x).dtype
        if dtype not in KERNEL_DTYPES or view.tensor(w).dtype != dtype or len(view.tensor(x).shape) not in (3, 4, 5):
            return None
        if bias is not None and not (isinstance(bias, dict) and "tensor" in bias):
            return None
        settings = [node.arg(n) for n in ("stride", "padding", "dilation", "transposed", "output_padding", "groups")]
        stride, padding, dilation, transposed, output_padding, groups = settings
        if any(int_list(v) is None for v in (stride, padding, dilation, output_padding)) or not isinstance(groups, int):
            return None
        out = node.outputs[0]
        chain = follow(view.with_claimed(frozenset([node.index])), out)
        nodes = [node.index] + (sorted(chain.nodes) if chain else [])
        final = chain.output if chain else out
        kind = "conv_lowp" if dtype != "float32" else ("conv_transposed_fp32" if transposed else "conv_fp32")
        c_in_g = view.tensor(w).shape[0] // groups if transposed else view.tensor(w).shape[1]
        taps = math.prod(view.tensor(w).shape[2:])
        window = c_in_g * taps  # each output's reduction: a group's input channels times the taps
        tap_outer = self.kind == f"{kind}x3" and kind in ("conv_fp32", "conv_transposed_fp32")
        folded = self.kind == "conv_folded_fp32x3" and kind == "conv_fp32"
        folded_t = self.kind == "conv_transposed_folded_fp32x3" and kind == "conv_transposed_fp32"
        depthwise = self.kind == "conv_depthwise"
        if depthwise:
            # One input channel a group, every input channel its own group.
            if transposed or c_in_g != 1 or groups != view.tensor(x).shape[1] or taps > DEPTHWISE_MAX_TAPS:
                return None
            kind = self.kind
        elif tap_outer or folded or folded_t:
            # Few input channels a group: the whole window (a transposed convolution's: each
            # phase's) is one reduction (``folded.py``, ``folded_transposed.py``); more: the taps
            # outermost (``tap_gemm.py``).
            few = c_in_g < TAPS_MIN_CHANNELS
            if few != (folded or folded_t) or (folded and window > FOLDED_MAX_K):
                return None
            if few and _out_channels_g(view, w, groups, bool(transposed)) < FOLDED_MIN_OUT_CHANNELS:
                return None
            kind = self.kind
        flops = view.graph.node_flops(node)
        reads = (x, w) + ((bias["tensor"],) if bias else ()) + (chain.operands if chain else ())
        cost = RegionCost(bytes=sum(nbytes(view.tensor(t)) for t in dict.fromkeys(reads)) + nbytes(view.tensor(final)), flops=flops)
        args = ", ".join(repr(int_list(v)) for v in (stride, padding, dilation))
        ops = len(chain.nodes) if chain else 0
        bias_arg = lambda names: names.read(bias["tensor"]) if bias else "None"  # noqa: E731
        shape = list(view.tensor(x).shape)
        if depthwise:
            module, how = DEPTHWISE_MODULE, (
                f"depthwise convolution {shape} {dtype} ({list(view.tensor(w).shape[2:])} taps a channel) as direct multiply-adds "
                "in float32, each tap one coalesced load of the input plane, with its bias"
            )
            call = lambda names: (f"conv_depthwise({names.read(x)}, {names.read(w)}, {bias_arg(names)}, {args}, {groups}, "  # noqa: E731
                                  f"{_chain_post(chain, names.read)})")
        elif folded:
            module, how = FOLDED_MODULE, (
                f"convolution {shape} float32 with {c_in_g} input channel(s) a group as one implicit GEMM over its whole "
                f"{window}-long window (channels x taps), {CONV_X3_HOW}"
            )
            call = lambda names: (f"conv_folded({names.read(x)}, {names.read(w)}, {bias_arg(names)}, {args}, {groups}, "  # noqa: E731
                                  f"{_chain_post(chain, names.read)}, precision=\"tf32x3\")")
        elif folded_t:
            module, how = FOLDED_TRANSPOSED_MODULE, (
                f"transposed convolution {shape} float32 with {c_in_g} input channel(s) a group as one implicit GEMM per "
                f"output phase over every (channel, tap) pair that reaches it, {CONV_X3_HOW}"
            )
            call = lambda names: (f"conv_transposed_folded({names.read(x)}, {names.read(w)}, {bias_arg(names)}, {args}, "  # noqa: E731
                                  f"{int_list(output_padding)!r}, {groups}, {_chain_post(chain, names.read)}, precision=\"tf32x3\")")
        elif tap_outer:
            # The layout the GPU benchmark's verdict was measured in (``kernels/verdict.py --layouts``).
            verdict = view.verdicts.get(kind)
            last = bool(verdict and verdict.channels_last)
            module, how = TAPS_MODULE, (
                f"{'transposed ' if transposed else ''}convolution {shape} float32 as an implicit GEMM walking the filter's taps"
                f"{' (split by output phase: only the taps that reach each)' if transposed else ''}, {CONV_X3_HOW}"
                + (", the input made channels-last first (the layout the GPU benchmark measured faster)" if last else "")
            )
            layout = ", channels_last=True" if last else ""
            call = lambda names: (f"conv_taps({names.read(x)}, {names.read(w)}, {bias_arg(names)}, {args}, {bool(transposed)}, "  # noqa: E731
                                  f"{int_list(output_padding)!r}, {groups}, {_chain_post(chain, names.read)}, precision=\"tf32x3\"{layout})")
        else:
            module, how = CONV_MODULE, f"{'transposed ' if transposed else ''}convolution {shape} {dtype} as an implicit GEMM with its bias"
            call = lambda names: (f"conv_forward({names.read(x)}, {names.read(w)}, {bias_arg(names)}, {args}, {bool(transposed)}, "  # noqa: E731
                                  f"{int_list(output_padding)!r}, {groups}, {_chain_post(chain, names.read)})")
        return Match(
            template=self.name,
            kind=kind,
            nodes=frozenset(nodes),
            outputs=(final,),
            modules=(module,),
            emit=lambda names: [f"{names.define(final)} = {call(names)}"],
            cost=cost,
            rationale=f"{how} and {ops} epilogue op(s) in registers (one pass over the output)",
            params={"kind": kind, "epilogue_ops": ops, "groups": groups},
        )


#: Structure that saves work is offered at once; the same work done differently waits for the GPU
#: benchmark's verdict.
register(GemmEpilogue("gemm_triangular", 9, offered_unmeasured=True))
register(GemmEpilogue("gemm_fp32", 10, offered_unmeasured=False))
register(GemmEpilogue("gemm_fp32x3", 9, offered_unmeasured=False))
register(GemmEpilogue("gemm_lowp", 10, offered_unmeasured=False))
for _kind in ("conv_fp32", "conv_transposed_fp32", "conv_lowp"):
    register(ConvEpilogue(_kind, 12, offered_unmeasured=False))
for _kind in ("conv_fp32x3", "conv_transposed_fp32x3", "conv_folded_fp32x3", "conv_transposed_folded_fp32x3", "conv_depthwise"):
    register(ConvEpilogue(_kind, 11, offered_unmeasured=False))
