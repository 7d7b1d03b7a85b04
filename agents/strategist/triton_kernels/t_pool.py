"""The pooling template: a max pool whose indices nothing reads, or an average pool, over 1-3
dimensions, with the elementwise chain that follows it, as one call of ``kernels/pool/kernel.py``.

Pooling is memory-bound work PyTorch's kernels do at uneven distances from the floor (a dilated
3-D max pool several times above it, a 2-D average pool near it) and inductor lowers to loops of
its own; the kernel's taps are compile-time constants, each a coalesced load. Offered once
``kernels/pool/bench_pool.py`` measured it winning (``offered_unmeasured = False``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from kloom.opgraph import VIEW_OPS, OpNode, int_list

from .t_common import chain_code, cost, epilogue, float_tensor
from .templates import GraphView, Match, register

#: Pooling operators by aten name: (kind, pooled dimensions).
POOL_OPS = {
    "aten::max_pool1d_with_indices": ("max", 1),
    "aten::max_pool2d_with_indices": ("max", 2),
    "aten::max_pool3d_with_indices": ("max", 3),
    "aten::max_pool1d": ("max", 1),
    "aten::max_pool2d": ("max", 2),
    "aten::max_pool3d": ("max", 3),
    "aten::avg_pool1d": ("avg", 1),
    "aten::avg_pool2d": ("avg", 2),
    "aten::avg_pool3d": ("avg", 3),
}
#: The most taps a window may have (``kernels.pool.kernel.POOL_MAX_TAPS``).
POOL_MAX_TAPS = 512


def _ints(value, nd: int) -> tuple[int, ...] | None:
    """A size argument as ``nd`` ints (an empty list, as PyTorch's default stride, is None)."""
    items = int_list(value)
    if items is None:
        return None
    return tuple(items) * nd if len(items) == 1 else tuple(items) if len(items) == nd else None


def _dead_views(view: GraphView, tid: int) -> set[int] | None:
    """The view nodes (free, themselves unread) that are all that reads ``tid``: the squeeze a
    1-D max pool's indices go through. None when anything else reads it or the step returns it."""
    if tid in view.returned:
        return None
    nodes: set[int] = set()
    for user in view.users(tid):
        node = view.node(user)
        if node.op not in VIEW_OPS or not view.free(user) or any(view.users(t) or t in view.returned for t in node.outputs if t is not None):
            return None
        nodes.add(user)
    return nodes


def _squeezed_unit(view: GraphView, node: OpNode, x: int, nd: int, k, p) -> tuple[int, int] | None:
    """``(squeeze node, dim)`` where the pooled values' one reader squeezes away the first pooled
    dimension, a unit one the window does not span (how ``max_pool1d`` reaches a 2-D pool)."""
    user = view.only_user(node.outputs[0])
    if nd < 2 or user is None or not view.free(user) or view.node(user).op != "aten::squeeze":
        return None
    shape = view.tensor(x).shape
    dim = view.node(user).arg("dim")
    first = len(shape) - nd
    if not isinstance(dim, int) or dim % len(shape) != first or shape[first] != 1 or k[0] != 1 or p[0] != 0:
        return None
    return user, first


def _settings(view: GraphView, node: OpNode) -> dict | None:
    """The call's keyword arguments for ``pool`` where the kernel computes this node, else None
    (``views``: the view nodes the region claims too: those of its unread indices, and a squeeze
    of its values)."""
    kind, nd = POOL_OPS[node.op]
    x = float_tensor(view, node.arg("self"))
    dead = _dead_views(view, node.outputs[1]) if len(node.outputs) > 1 and node.outputs[1] is not None else set()
    if x is None or len(view.tensor(x).shape) < nd + 1 or dead is None:
        return None
    k = _ints(node.arg("kernel_size"), nd)
    stride = node.arg("stride")
    s = k if stride is None or stride == {"list": []} else _ints(stride, nd)
    p = _ints(node.arg("padding", 0), nd)
    d = _ints(node.arg("dilation", 1), nd) if kind == "max" else (1,) * nd
    if None in (k, s, p, d) or math.prod(k) > POOL_MAX_TAPS or any(2 * pp > kk for pp, kk in zip(p, k)):
        return None
    settings = {"x": x, "kind": kind, "k": k, "s": s, "p": p, "d": d, "ceil": bool(node.arg("ceil_mode", False)), "views": dead,
                "out": node.outputs[0], "squeeze": None}
    unit = _squeezed_unit(view, node, x, nd, k, p)
    if unit is not None:
        # A 1-D pool run as a 2-D one over an inserted unit dimension: pool the input without it.
        settings.update(squeeze=unit[1], out=view.node(unit[0]).outputs[0], k=k[1:], s=s[1:], p=p[1:], d=d[1:])
        settings["views"] = dead | {unit[0]}
    if kind == "avg":
        override = node.arg("divisor_override")
        if override is not None and not isinstance(override, int):
            return None
        settings.update(count_pad=bool(node.arg("count_include_pad", True)), override=override)
    return settings


class Pool:
    offered_unmeasured = False  # PyTorch's own kernels are near the floor for some shapes
    name, kind, priority, module = "pool", "pool", 28, "kernels.pool.kernel"

    def match(self, view: GraphView) -> Iterator[Match]:
        for node in view.graph.nodes:
            if not view.free(node.index) or node.op not in POOL_OPS:
                continue
            settings = _settings(view, node)
            if settings is not None:
                yield self._match(view, node, settings, epilogue(view, settings["out"], node))

    def _match(self, view: GraphView, node: OpNode, c: dict, post) -> Match:
        out = post.output if post else c["out"]
        avg = f", {c['count_pad']}, {c['override']!r}" if c["kind"] == "avg" else ""
        squeeze = f".squeeze({c['squeeze']})" if c["squeeze"] is not None else ""

        def emit(names) -> list[str]:
            call = f"pool({names.read(c['x'])}{squeeze}, {c['kind']!r}, {list(c['k'])!r}, {list(c['s'])!r}, {list(c['p'])!r}, {list(c['d'])!r}, {c['ceil']}{avg}, post={chain_code(post, names.read)})"
            return [f"{names.define(out)} = {call}"]

        fused = f", {len(post.nodes)} elementwise op(s) fused after it" if post else ""
        shape = list(view.tensor(c["x"]).shape)
        return Match(
            template=self.name,
            kind=self.kind,
            nodes=frozenset({node.index} | c["views"] | (post.nodes if post else set())),
            outputs=(out,),
            modules=(self.module,),
            emit=emit,
            cost=cost(view, [c["x"]] + list(post.operands if post else ()), [out]),
            rationale=f"{c['kind']} pool {list(c['k'])} over {shape} {view.tensor(c['x']).dtype}, each tap a coalesced load, in one read{fused}",
            params={"op": c["kind"], "kernel_size": list(c["k"])},
        )


register(Pool())
