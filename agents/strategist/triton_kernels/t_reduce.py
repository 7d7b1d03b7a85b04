"""Templates of reductions (sum, mean, max, min, prod, argmax, argmin, vector norms (``norm``,
``linalg_vector_norm``),
log-sum-exp) and scans (cumsum, cumprod, reversed by a flip on each side), each with the
elementwise chain that makes its input (a prologue) and the one that follows it (an epilogue)."""

from __future__ import annotations

import math
from collections.abc import Iterator

from kloom.opgraph import OpNode, decode_float

from .chains import Chain
from .t_common import chain_code, cost, epilogue, filled_tensor, prologue
from .templates import GraphView, Match, register

_NORMS = {1.0: "norm1", 2.0: "norm2", math.inf: "norm_inf"}


def _dims(value, ndim: int) -> list[int] | None:
    """Reduced dimensions from a ``dim`` argument ([] for all), or None when not consecutive."""
    if value is None:
        return []
    dims = value["list"] if isinstance(value, dict) else [value]
    dims = sorted({int(d) % max(ndim, 1) for d in dims})
    return dims if not dims or dims == list(range(dims[0], dims[-1] + 1)) else None


def _reduction(view: GraphView, node: OpNode) -> tuple[str, list[int], bool, bool] | None:
    """(op, dims, keepdim, with indices) of a reduction node the kernels compute, else None."""
    name = node.op.split("::")[-1]
    x = filled_tensor(view, node.arg("self"))
    if x is None or (node.arg("dtype") is not None and node.arg("dtype").get("dtype") != view.tensor(x).dtype):
        return None
    ndim = len(view.tensor(x).shape)
    keepdim = bool(node.arg("keepdim", False))
    if name in ("sum", "mean", "amax", "amin", "logsumexp"):
        op = {"amax": "max", "amin": "min"}.get(name, name)
        dims = _dims(node.arg("dim"), ndim)
        return (op, dims, keepdim, False) if dims is not None else None
    if name in ("max", "min"):
        if node.overload == "dim":
            values, indices = node.outputs
            indexed = bool(view.users(indices)) or indices in view.returned
            if not (view.users(values) or values in view.returned):
                return ("arg" + name, [int(node.arg("dim")) % ndim], keepdim, True) if indexed else None
            return (name, [int(node.arg("dim")) % ndim], keepdim, indexed)
        return (name, [], False, False) if node.overload == "" else None
    if name in ("argmax", "argmin"):
        dim = node.arg("dim")
        return (name, [] if dim is None else [int(dim) % ndim], keepdim, True)
    if name == "prod":
        dim = node.arg("dim")
        return ("prod", [] if dim is None else [int(dim) % ndim], keepdim, False)
    if name in ("linalg_vector_norm", "norm"):
        order = decode_float(node.arg("ord" if name == "linalg_vector_norm" else "p"))
        op = _NORMS.get(float(2 if order is None else order))
        dims = _dims(node.arg("dim"), ndim)
        return (op, dims, keepdim, False) if op and dims is not None else None
    return None


class Reduction:
    offered_unmeasured = True  # does the work eager does, in fewer passes
    name, kind, priority, module = "reduction", "reduction", 30, "kernels.reduce.kernel"

    def match(self, view: GraphView) -> Iterator[Match]:
        for node in view.graph.nodes:
            if not view.free(node.index) or node.overload.startswith("out"):
                continue
            spec = _reduction(view, node)
            if spec is None:
                continue
            op, dims, keepdim, indexed = spec
            x = node.arg("self")["tensor"]
            arg_only = op in ("argmax", "argmin")
            pre = prologue(view, x, node.index, exact=arg_only or indexed)
            start = pre.start if pre else x
            post = None if (arg_only or indexed) else epilogue(view, node.outputs[0], node)
            yield self._match(view, node, op, dims, keepdim, indexed, start, pre, post)

    def _match(self, view, node, op, dims, keepdim, indexed, start, pre: Chain | None, post: Chain | None) -> Match:
        values = node.outputs[0]
        if op in ("argmax", "argmin") and node.op.endswith(("::max", "::min")):
            outputs = (node.outputs[1],)
        elif indexed and len(node.outputs) == 2:
            outputs = (values, node.outputs[1])
        else:
            outputs = (post.output if post else values,)
        nodes = {node.index} | (pre.nodes if pre else set()) | (post.nodes if post else set())
        dtype = view.tensor(outputs[0]).dtype

        def emit(names) -> list[str]:
            x = names.read(start)
            if len(outputs) == 2:
                call = f"reduce_with_indices({x}, {dims[0]}, {op!r}, {keepdim}, pre={chain_code(pre, names.read)})"
                return [f"{names.define(outputs[0])}, {names.define(outputs[1])} = {call}"]
            call = f"reduce({x}, {dims!r}, {op!r}, {keepdim}, pre={chain_code(pre, names.read)}, post={chain_code(post, names.read)}, dtype=torch.{dtype})"
            return [f"{names.define(outputs[0])} = {call}"]

        fused = "".join(
            f", {len(c.nodes)} elementwise op(s) fused {where}" for c, where in ((pre, "before it"), (post, "after it")) if c is not None
        )
        over = "all dimensions" if not dims else f"dim(s) {dims}"
        return Match(
            template=self.name,
            kind=self.kind,
            nodes=frozenset(nodes),
            outputs=outputs,
            modules=(self.module,),
            emit=emit,
            cost=cost(view, [start] + list(pre.operands if pre else ()) + list(post.operands if post else ()), list(outputs)),
            rationale=f"{op} over {over} of {list(view.tensor(start).shape)} {view.tensor(start).dtype} in one read{fused}",
            params={"op": op, "dims": dims},
        )


class Scan:
    offered_unmeasured = True  # does the work eager does, in fewer passes
    name, kind, priority, module = "scan", "scan", 30, "kernels.scan.kernel"

    def match(self, view: GraphView) -> Iterator[Match]:
        for node in view.graph.nodes:
            if not view.free(node.index) or node.op not in ("aten::cumsum", "aten::cumprod") or node.overload.startswith("out"):
                continue
            x = filled_tensor(view, node.arg("self"))
            if x is None or (node.arg("dtype") is not None and node.arg("dtype").get("dtype") != view.tensor(x).dtype):
                continue
            dim = int(node.arg("dim")) % max(len(view.tensor(x).shape), 1)
            nodes = {node.index}
            out = node.outputs[0]
            flips = self._flips(view, x, out, node, dim)
            reverse = flips is not None
            pre = None
            if reverse:
                before, after = flips
                nodes |= {before.index, after.index}
                start, out = before.arg("self")["tensor"], after.outputs[0]
            else:
                pre = prologue(view, x, node.index)
                start = pre.start if pre else x
            post = epilogue(view, out, view.node(max(nodes)))
            final = post.output if post else out
            nodes |= (pre.nodes if pre else set()) | (post.nodes if post else set())
            op = "prod" if node.op == "aten::cumprod" else "sum"
            dtype = view.tensor(final).dtype

            def emit(names, start=start, dim=dim, op=op, reverse=reverse, pre=pre, post=post, final=final, dtype=dtype) -> list[str]:
                call = f"scan({names.read(start)}, {dim}, {op!r}, {reverse}, pre={chain_code(pre, names.read)}, post={chain_code(post, names.read)}, dtype=torch.{dtype})"
                return [f"{names.define(final)} = {call}"]

            yield (
                Match(
                    template=self.name,
                    kind=self.kind,
                    nodes=frozenset(nodes),
                    outputs=(final,),
                    modules=(self.module,),
                    emit=emit,
                    cost=cost(view, [start] + list(pre.operands if pre else ()) + list(post.operands if post else ()), [final]),
                    rationale=(
                        f"cum{op} over dim {dim} of {list(view.tensor(start).shape)} {view.tensor(start).dtype}, read and written once"
                        + (" (reversed in place of the two flips)" if reverse else "")
                        + (f", {len(pre.nodes)} elementwise op(s) fused before it" if pre else "")
                    ),
                    params={"op": op, "reverse": reverse},
                )
            )

    @staticmethod
    def _flips(view: GraphView, x: int, out: int, node: OpNode, dim: int) -> tuple[OpNode, OpNode] | None:
        """The ``flip`` before and after the scan along its dimension, when both are there and
        nothing else reads what they pass."""
        producer = view.producer.get(x)
        after = view.only_user(out)
        if producer is None or after is None or view.users(x) != [node.index] or x in view.returned:
            return None
        before, after = view.node(producer), view.node(after)
        for flip in (before, after):
            dims = flip.arg("dims")
            ndim = len(view.tensor(x).shape)
            if flip.op != "aten::flip" or not view.free(flip.index) or [int(d) % ndim for d in dims["list"]] != [dim]:
                return None
        return before, after


for _template in (Reduction(), Scan()):
    register(_template)
