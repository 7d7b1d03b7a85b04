"""Template: a chain of elementwise operators as one pass over memory
(``kernels/elementwise/kernel.py``: ``ew_chain``).

It runs after every template that can take a chain as its epilogue (norms, reductions, GEMMs),
so it claims only the chains nothing else fused.
"""

from __future__ import annotations

from collections.abc import Iterator

from .chains import Chain, follow, scalars_code
from .lowering import lower
from .templates import GraphView, Match, RegionCost, nbytes, register

MODULE = "kernels.elementwise.kernel"


def chain_cost(view: GraphView, chain: Chain) -> RegionCost:
    """What the fused chain moves: each operand read once, the result written once."""
    moved = sum(nbytes(view.tensor(t)) for t in chain.operands) + nbytes(view.tensor(chain.output))
    return RegionCost(bytes=moved, flops=view.tensor(chain.output).numel * chain.steps)


def eager_bytes(view: GraphView, nodes) -> int:
    """What the replaced operators move when each runs on its own."""
    total = 0
    for i in nodes:
        node = view.node(i)
        total += sum(nbytes(view.tensor(t)) for t in dict.fromkeys(node.tensor_args()))
        total += sum(nbytes(view.tensor(t)) for t in node.outputs if t is not None)
    return total


def chain_call(chain: Chain, read, shape: tuple, dtype: str) -> str:
    """The ``ew_chain`` call computing ``chain`` (operands named by ``read``)."""
    inputs = ", ".join(read(t) for t in chain.operands)
    return f"ew_chain([{inputs}], {chain.program!r}, {scalars_code(chain.scalars)}, {tuple(shape)!r}, torch.{dtype})"


class ElementwiseChain:
    name = "elementwise_chain"
    kind = "elementwise"
    priority = 90
    offered_unmeasured = True

    def match(self, view: GraphView) -> Iterator[Match]:
        for node in view.graph.nodes:
            if not view.free(node.index) or node.op.endswith("_") or lower(node, lambda t: view.tensor(t).dtype) is None:
                continue
            out = node.outputs[0]
            shape = view.tensor(out).shape
            start = next((t for t in node.tensor_args() if view.tensor(t).shape == shape), None)
            if start is None:
                continue
            chain = follow(view, start, operands=(start,), owned=False, first=node.index)
            if chain is None or node.index not in chain.nodes:
                continue
            yield self._match(view, chain)
            view = view.with_claimed(chain.nodes)

    def _match(self, view: GraphView, chain: Chain) -> Match:
        shape, dtype = view.tensor(chain.output).shape, chain.dtype
        saved = eager_bytes(view, chain.nodes) - chain_cost(view, chain).bytes
        return Match(
            template=self.name,
            kind=self.kind,
            nodes=chain.nodes,
            outputs=(chain.output,),
            modules=(MODULE,),
            emit=lambda names: [f"{names.define(chain.output)} = {chain_call(chain, names.read, shape, dtype)}"],
            cost=chain_cost(view, chain),
            rationale=(
                f"{len(chain.nodes)} elementwise operator(s) over {list(shape)} {dtype} in one pass: each input read once, "
                f"one write ({saved / 1e6:.1f} MB less memory traffic than eager)"
            ),
            params={"steps": chain.steps, "operands": len(chain.operands)},
        )


register(ElementwiseChain())
