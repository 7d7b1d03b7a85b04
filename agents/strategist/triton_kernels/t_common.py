"""What the library's templates share: the epilogue and prologue chains around a kernel's node,
the code that passes them to a kernel, and the checks on a node's tensors."""

from __future__ import annotations

from kloom.opgraph import OpNode

from .chains import Chain, compile_nodes, follow, scalars_code
from .lowering import FLOAT_DTYPES, lower
from .templates import GraphView, RegionCost, nbytes


def float_tensor(view: GraphView, value) -> int | None:
    """The id of a float32/bfloat16/float16 tensor argument, else None."""
    if isinstance(value, dict) and "tensor" in value and view.tensor(value["tensor"]).dtype in FLOAT_DTYPES:
        return value["tensor"]
    return None


def filled_tensor(view: GraphView, value) -> int | None:
    """``float_tensor``'s id where the tensor has a dimension and an element (the reduction and
    scan kernels refuse a 0-d or empty one, the softmax a 0-d one), else None."""
    tid = float_tensor(view, value)
    return tid if tid is not None and view.tensor(tid).shape and view.tensor(tid).numel else None


def optional_tensor(value) -> int | None | bool:
    """A tensor argument's id, None for an absent optional one, False for anything else."""
    if value is None:
        return None
    if isinstance(value, dict) and "tensor" in value:
        return value["tensor"]
    return False


def unused(view: GraphView, node: OpNode, keep: int = 0) -> bool:
    """Whether nothing reads ``node``'s outputs other than output ``keep``."""
    return all(t is None or (not view.users(t) and t not in view.returned) for k, t in enumerate(node.outputs) if k != keep)


def epilogue(view: GraphView, tid: int, node: OpNode) -> Chain | None:
    """The elementwise chain that can follow ``tid`` (made by ``node``) inside the same kernel."""
    return follow(view, tid, owned=True)


def prologue(view: GraphView, tid: int, consumer: int, max_depth: int = 16, exact: bool = False) -> Chain | None:
    """The elementwise chain that makes ``tid`` for ``consumer`` alone, from a value of the
    same shape the consumer's kernel can load instead (``x * mask`` before a cumulative sum).
    ``exact``: its low-precision values rounded as the reference's are (the consumer picks an
    index from them)."""
    if view.users(tid) != [consumer] or tid in view.returned:
        return None
    shape = view.tensor(tid).shape
    starts: list[int] = []
    frontier, seen = [tid], set()
    while frontier and len(seen) < max_depth:
        t = frontier.pop()
        producer = view.producer.get(t)
        node = view.node(producer) if producer is not None else None
        if node is None or not view.free(node.index) or node.writes or lower(node, lambda x: view.tensor(x).dtype) is None:
            if t != tid and t not in starts:
                starts.append(t)
            continue
        seen.add(node.index)
        frontier.extend(a for a in node.tensor_args() if view.tensor(a).shape == shape)
    for start in sorted(starts):
        if view.tensor(start).dtype not in FLOAT_DTYPES:
            continue
        chain = compile_nodes(view, start, sorted(seen), exact=exact)
        if chain is not None and chain.output == tid:
            return chain
    return None


def chain_code(chain: Chain | None, read) -> str:
    """A kernel's ``pre=``/``post=`` argument for ``chain``."""
    if chain is None:
        return "None"
    return f"([{', '.join(read(t) for t in chain.operands)}], {chain.program!r}, {scalars_code(chain.scalars)})"


def cost(view: GraphView, reads, writes, flops: int = 0) -> RegionCost:
    """The region's floor: each tensor it reads and writes moved once."""
    return RegionCost(bytes=sum(nbytes(view.tensor(t)) for t in set(reads) | set(writes)), flops=flops)
