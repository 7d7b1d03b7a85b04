"""Templates of the row-wise families: softmax and log-softmax, LayerNorm, GroupNorm (and the
InstanceNorm that is a group per channel), BatchNorm (training statistics or running ones) and
cross-entropy. Each takes the elementwise chain that follows its result as its epilogue."""

from __future__ import annotations

from collections.abc import Iterator

from kloom.opgraph import OpNode, decode_float

from .chains import Chain
from .t_common import chain_code, cost, epilogue, filled_tensor, float_tensor, optional_tensor, prologue, unused
from .templates import GraphView, Match, register


def _finish(view: GraphView, node: OpNode, template, call: str, reads: list[int], rationale: str, params: dict, writes=(), pre: Chain | None = None) -> Match:
    """The match of ``node`` (and its epilogue chain; ``pre``: the chain that makes its input,
    computed on the values the kernel loads): ``call`` is the kernel call's text with
    ``{post}``, ``{pre}`` and ``{dtype}`` left to fill, its tensors named ``{t<id>}``."""
    out = node.outputs[0]
    chain = epilogue(view, out, node)
    final = chain.output if chain else out
    nodes = frozenset({node.index} | (chain.nodes if chain else set()) | (pre.nodes if pre else set()))
    dtype = view.tensor(final).dtype
    operands = (list(chain.operands) if chain else []) + (list(pre.operands) if pre else [])

    def emit(names) -> list[str]:
        text = call.format(
            post=chain_code(chain, names.read), pre=chain_code(pre, names.read), dtype=f"torch.{dtype}", **{f"t{t}": names.read(t) for t in reads}
        )
        return [f"{names.define(final)} = {text}"]

    fused = f", with {len(chain.nodes)} elementwise op(s) fused after it" if chain else ""
    fused += f", {len(pre.nodes)} before it (on the values it loads)" if pre else ""
    return Match(
        template=template.name,
        kind=template.kind,
        nodes=nodes,
        outputs=(final,),
        modules=(template.module,),
        emit=emit,
        cost=cost(view, reads + operands, [final]),
        rationale=rationale + fused,
        params={**params, "epilogue_ops": len(chain.nodes) if chain else 0},
        writes=tuple(writes),
    )


def _shape(view: GraphView, tid: int) -> str:
    info = view.tensor(tid)
    return f"{list(info.shape)} {info.dtype}"


class Softmax:
    offered_unmeasured = True  # does the work eager does, in fewer passes
    name, kind, priority, module = "softmax", "softmax", 20, "kernels.softmax.kernel"

    def match(self, view: GraphView) -> Iterator[Match]:
        for node in view.graph.nodes:
            if not view.free(node.index) or node.op not in ("aten::_softmax", "aten::_log_softmax"):
                continue
            x = filled_tensor(view, node.arg("self"))
            if x is None:
                continue
            log = node.op == "aten::_log_softmax"
            dim = int(node.arg("dim"))
            # The scale and mask before attention's softmax, computed on the values it loads.
            pre = prologue(view, x, node.index)
            src = pre.start if pre else x
            call = f"softmax({{t{src}}}, {dim}, log={log}, post={{post}}, dtype={{dtype}}, pre={{pre}})"
            what = "log-softmax" if log else "softmax"
            rationale = f"{what} over dim {dim} of {_shape(view, x)}: one read per row that fits, online max and sum otherwise"
            yield _finish(view, node, self, call, [src], rationale, {"op": what}, pre=pre)


class LayerNorm:
    offered_unmeasured = True  # does the work eager does, in fewer passes
    name, kind, priority, module = "layer_norm", "layer_norm", 20, "kernels.layernorm.kernel"

    def match(self, view: GraphView) -> Iterator[Match]:
        for node in view.graph.nodes:
            if not view.free(node.index) or not unused(view, node):
                continue
            if node.op == "aten::native_layer_norm":
                x, w, b = float_tensor(view, node.arg("input")), optional_tensor(node.arg("weight")), optional_tensor(node.arg("bias"))
                ndim = len(node.arg("normalized_shape")["list"])
                call = f"layer_norm({{t{x}}}, {ndim}, {_name(w)}, {_name(b)}, {float(decode_float(node.arg('eps')))!r}, post={{post}}, dtype={{dtype}})"
                what = "LayerNorm"
            elif node.op == "aten::_fused_rms_norm":
                x, w, b = float_tensor(view, node.arg("input")), optional_tensor(node.arg("weight")), None
                ndim = len(node.arg("normalized_shape")["list"])
                eps = decode_float(node.arg("eps"))
                if eps is None:
                    continue  # torch's default eps depends on the dtype; not guessed here
                call = f"rms_norm({{t{x}}}, {ndim}, {_name(w)}, {float(eps)!r}, post={{post}}, dtype={{dtype}})"
                what = "RMSNorm"
            elif node.op == "aten::native_group_norm":
                x, w, b = float_tensor(view, node.arg("input")), optional_tensor(node.arg("weight")), optional_tensor(node.arg("bias"))
                call = f"group_norm({{t{x}}}, {int(node.arg('group'))}, {_name(w)}, {_name(b)}, {float(decode_float(node.arg('eps')))!r}, post={{post}}, dtype={{dtype}})"
                what = f"GroupNorm ({node.arg('group')} groups)"
            else:
                continue
            if x is None or w is False or b is False:
                continue
            reads = [t for t in (x, w, b) if t is not None]
            yield _finish(view, node, self, call, reads, f"{what} of {_shape(view, x)}: statistics and affine in one pass over each row", {"op": what})


#: BatchNorm operators: (momentum argument, eps argument, training: an argument name or a constant).
_BATCH_NORMS = {
    "native_batch_norm": ("momentum", "eps", "training"),
    "_native_batch_norm_legit": ("momentum", "eps", "training"),
    "cudnn_batch_norm": ("exponential_average_factor", "epsilon", "training"),
    "miopen_batch_norm": ("exponential_average_factor", "epsilon", "training"),
    "_batch_norm_with_update": ("momentum", "eps", True),
    "_native_batch_norm_legit_no_training": ("momentum", "eps", False),
}


class BatchNorm:
    offered_unmeasured = True  # does the work eager does, in fewer passes
    name, kind, priority, module = "batch_norm", "batch_norm", 20, "kernels.batchnorm.kernel"

    def match(self, view: GraphView) -> Iterator[Match]:
        for node in view.graph.nodes:
            spec = _BATCH_NORMS.get(node.op.split("::")[-1])
            if spec is None or not view.free(node.index) or not unused(view, node):
                continue
            momentum, eps, training = spec
            training = bool(node.arg(training)) if isinstance(training, str) else training
            x = float_tensor(view, node.arg("input"))
            tensors = [optional_tensor(node.arg(k)) for k in ("weight", "bias", "running_mean", "running_var")]
            if x is None or False in tensors or view.tensor(x).numel == 0:
                continue
            w, b, rm, rv = tensors
            written = dict(node.writes)
            if set(written) - {rm, rv}:
                continue
            call = (
                f"batch_norm({{t{x}}}, {_name(w)}, {_name(b)}, {_name(rm)}, {_name(rv)}, {training}, "
                f"{float(decode_float(node.arg(momentum)))!r}, {float(decode_float(node.arg(eps)))!r}, post={{post}}, dtype={{dtype}})"
            )
            reads = [t for t in (x, w, b, rm, rv) if t is not None]
            mode = "batch statistics (split Welford), running statistics updated" if training else "running statistics"
            yield (
                _finish(view, node, self, call, reads, f"BatchNorm of {_shape(view, x)} with {mode}, normalised in one pass", {"training": training}, node.writes)
            )


class CrossEntropy:
    offered_unmeasured = True  # does the work eager does, in fewer passes
    name, kind, priority, module = "cross_entropy", "cross_entropy", 15, "kernels.cross_entropy.kernel"

    def match(self, view: GraphView) -> Iterator[Match]:
        for nll in view.graph.nodes:
            if nll.op != "aten::nll_loss_forward" or not view.free(nll.index) or nll.arg("weight") is not None or not unused(view, nll):
                continue
            logp = nll.arg("self")["tensor"]
            producer = view.producer.get(logp)
            if producer is None or not view.free(producer) or view.users(logp) != [nll.index] or logp in view.returned:
                continue
            lsm = view.node(producer)
            x = float_tensor(view, lsm.arg("self"))
            if lsm.op != "aten::_log_softmax" or x is None or len(view.tensor(x).shape) != 2 or int(lsm.arg("dim")) % 2 != 1:
                continue
            target = nll.arg("target")["tensor"]
            reduction = {0: "none", 1: "mean", 2: "sum"}.get(int(nll.arg("reduction")))
            if reduction is None or view.tensor(target).dtype not in ("int64", "int32") or lsm.arg("half_to_float"):
                continue
            out = nll.outputs[0]
            ignore = int(nll.arg("ignore_index"))

            def emit(names, x=x, target=target, out=out, reduction=reduction, ignore=ignore) -> list[str]:
                return [f"{names.define(out)} = cross_entropy({names.read(x)}, {names.read(target)}, {reduction!r}, {ignore})"]

            yield (
                Match(
                    template=self.name,
                    kind=self.kind,
                    nodes=frozenset({lsm.index, nll.index}),
                    outputs=(out,),
                    modules=(self.module,),
                    emit=emit,
                    cost=cost(view, [x, target], [out]),
                    rationale=f"cross-entropy of {_shape(view, x)} logits: one read, the log-softmax never written",
                    params={"reduction": reduction},
                )
            )


def _name(tid) -> str:
    """``{t<id>}`` for a tensor argument, ``None`` for an absent one."""
    return "None" if tid is None else f"{{t{tid}}}"


for _template in (Softmax(), LayerNorm(), BatchNorm(), CrossEntropy()):
    register(_template)
