"""The template protocol: how a kernel of the library (``kernels/``) is instantiated by structure
from the reference's op graph (``kloom.opgraph.OpGraph``).

A **template** knows one kernel-shaped pattern of the graph (a row-wise softmax, a chain of
elementwise ops, a GEMM with its epilogue, ...). Given the graph, it returns **matches**: each
claims a region of nodes that one call of an embedded kernel computes, and says how to write that
call. The strategist (``plan.py``) runs the registered templates in priority order, each seeing
only the nodes no earlier match claimed, checks every match (``check_match``: the region must be
replaceable as one statement), and the coder (``emit.py``) writes ``ModelNew.forward`` as the
graph replayed operator by operator, with each matched region replaced by its statement, behind a
guard that falls back to the reference's forward for inputs unlike the traced ones.

To add a template (the GEMM and convolution templates plug in this way)::

    class GemmEpilogue:
        name = "gemm_epilogue"      # unique; plans and the trajectory name it
        kind = "gemm"               # the key of the measured wins (kernels/wins.json)
        priority = 10               # lower runs first (claims its nodes before later templates)

        def match(self, view: GraphView) -> Iterator[Match]:
            ...  # yield mm/addmm nodes not in view.claimed, extended with their epilogue

    register(GemmEpilogue())

A ``Match`` carries its ``emit`` function: given a ``Namer`` (tensor id -> Python expression for
reads, a fresh variable name for the values it defines), it returns the statements (no
indentation) that compute the match's ``outputs``, calling functions of the kernel modules it
names in ``modules`` (dotted module paths under ``kernels``; their source is embedded in the
candidate by ``embed.py``, so the statement calls their top-level names directly). Names in
kernel modules are unique across the library (a test checks), so modules embed side by side.

Templates read the graph only: they must not import ``kernels`` (which imports Triton; the
strategist may run where Triton is not installed). What a kernel supports is stated here, on the
plan side, and checked again by the kernel's launcher at run time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from kloom.layout import dense_order
from kloom.opgraph import DTYPE_BYTES, OpGraph, OpNode, TensorInfo

if TYPE_CHECKING:
    from .plan import Measured


class Namer(Protocol):
    def read(self, tensor: int) -> str:
        """A Python expression for the tensor ``tensor`` (defined before the statement)."""

    def define(self, tensor: int) -> str:
        """The variable the statement assigns the tensor ``tensor`` to."""


@dataclass(frozen=True)
class RegionCost:
    """What a region must move and compute at least (its roofline), for ordering the plan."""

    bytes: int
    flops: int = 0
    #: The rate of the kernel's products (default: an H100's float32 CUDA-core rate, as
    #: ``dominance.py`` assumes for the operators it replaces).
    tflops: float = 60.0

    def ms(self, hbm_gbps: float = 3000.0) -> float:
        """The region's floor on a machine (default: an H100's HBM)."""
        return max(self.bytes / (hbm_gbps * 1e6), self.flops / (self.tflops * 1e9))


@dataclass(frozen=True)
class Match:
    """A region of the graph that one embedded kernel call computes."""

    template: str
    kind: str
    nodes: frozenset[int]  # the node indexes the region replaces
    outputs: tuple[int, ...]  # the tensor ids it defines that code after it reads (or the step returns)
    modules: tuple[str, ...]  # kernel modules whose source the candidate embeds, e.g. "kernels.softmax.kernel"
    emit: Callable[[Namer], list[str]]
    cost: RegionCost
    rationale: str  # what the kernel does better than the operators it replaces
    params: dict = field(default_factory=dict)  # what the statement was instantiated with (for the trajectory)
    #: Tensors the statement writes in place as the replaced nodes did ((id before, id after)
    #: pairs of those nodes' ``writes``: BatchNorm's running statistics).
    writes: tuple[tuple[int, int], ...] = ()


class Template(Protocol):
    name: str
    kind: str
    priority: int
    #: Whether the template is used before the GPU benchmark measured its kind (``plan.py``):
    #: False for kernels that only pay where they beat the vendor libraries on that hardware.
    offered_unmeasured: bool

    def match(self, view: "GraphView") -> Iterator[Match]:
        """The regions of ``view.graph`` (outside ``view.claimed``) this template computes, best
        first. They may overlap: the planner takes the first that passes ``check_match``, claims
        its nodes and asks again. A generator: the planner asks for one region a round, and a
        network with hundreds of batch norms would otherwise build all of them every round."""


class GraphView:
    """The graph with the maps templates need, the nodes earlier matches claimed, and the GPU
    benchmark's verdicts the matching runs under (a template whose statement follows its verdict,
    such as a convolution's input layout, reads them here)."""

    def __init__(self, graph: OpGraph, claimed: frozenset[int] = frozenset(), verdicts: dict[str, Measured] | None = None):
        self.graph = graph
        self.claimed = claimed
        self.verdicts = verdicts or {}
        self.producer = graph.producer()
        self.consumers = graph.consumers()
        self.returned = graph.output_ids()
        # Built once per graph and shared by every view ``with_claimed`` derives: the planner asks
        # for them per node of per chain of per round (quadratic in a deep network otherwise).
        self._by_storage: dict[int, list[int]] = {}
        for t in graph.tensors.values():
            self._by_storage.setdefault(t.storage, []).append(t.id)
        self._family = _version_families(graph)
        self._reads = [tuple(n.tensor_args()) for n in graph.nodes]
        self._written = [tuple(n.written()) for n in graph.nodes]

    def node(self, index: int) -> OpNode:
        return self.graph.nodes[index]

    def tensor(self, tid: int) -> TensorInfo:
        return self.graph.tensors[tid]

    def free(self, index: int) -> bool:
        return index not in self.claimed

    def users(self, tid: int) -> list[int]:
        """The nodes that read tensor ``tid``."""
        return self.consumers.get(tid, [])

    def only_user(self, tid: int) -> int | None:
        """The one node that reads ``tid`` when exactly one does and the step does not return it."""
        users = self.users(tid)
        if len(users) == 1 and tid not in self.returned:
            return users[0]
        return None

    def aliased(self, tid: int) -> bool:
        """Whether other values share ``tid``'s memory (views of it, or it of something; versions
        of it written in place do not count): a kernel that writes a fresh tensor instead of
        ``tid`` would then change what they see."""
        return bool(self._sharing(tid))

    def viewed_before(self, tid: int, first: int, made: set[int]) -> int | None:
        """A tensor outside ``made`` that shares ``tid``'s memory and existed before node ``first``
        (a leaf, or made by an earlier node), else None: ``tid`` is then a view of it (an
        ``alias``), and a kernel that writes ``tid`` as fresh memory would cut the two apart for
        every later write through either."""
        return next((t for t in self._sharing(tid) if t not in made and self.producer.get(t, -1) < first), None)

    def _sharing(self, tid: int) -> list[int]:
        """The tensors that share ``tid``'s memory, other than ``tid`` and its versions written in place."""
        family = self._family.get(tid, (tid,))
        return [t for t in self._by_storage.get(self.tensor(tid).storage, ()) if t not in family]

    def reads(self, index: int) -> tuple[int, ...]:
        """Ids of every tensor node ``index`` reads (``OpNode.tensor_args``), in argument order."""
        return self._reads[index]

    def written(self, index: int) -> tuple[int, ...]:
        """Ids of the tensors node ``index`` writes in place (``OpNode.written``)."""
        return self._written[index]

    def storages(self, tids) -> set[int]:
        """The memory (storage ids) the tensors ``tids`` live in."""
        return {self.tensor(t).storage for t in tids}

    def hazard(self, node: OpNode, read: set[int] | dict[int, int], wrote: set[int] | dict[int, int]) -> tuple[str, int, int] | None:
        """What keeps a kernel that runs after ``node`` from taking reads or writes from before
        it: ``("writes", storage, tensor)`` when ``node`` writes in place memory of ``read`` or
        ``wrote`` (a moved read would see the new values, a moved write would be overwritten),
        ``("reads", storage, tensor)`` when it reads memory of ``wrote`` (it would miss the
        write); None when neither."""
        for t in self._written[node.index]:
            storage = self.tensor(t).storage
            if storage in read or storage in wrote:
                return ("writes", storage, t)
        for t in self._reads[node.index]:
            storage = self.tensor(t).storage
            if storage in wrote:
                return ("reads", storage, t)
        return None

    def with_claimed(self, nodes: frozenset[int]) -> "GraphView":
        view = GraphView.__new__(GraphView)
        view.__dict__.update(self.__dict__)
        view.claimed = self.claimed | nodes
        return view


def _version_families(graph: OpGraph) -> dict[int, frozenset[int]]:
    """For each tensor written in place, the set of it and its versions (before and after every
    in-place write of the same tensor); tensors never written in place are absent."""
    parent: dict[int, int] = {}

    def root(t: int) -> int:
        while parent.get(t, t) != t:
            parent[t] = parent.get(parent[t], parent[t])
            t = parent[t]
        return t

    for node in graph.nodes:
        for old, new in node.writes:
            parent.setdefault(old, old)
            parent.setdefault(new, new)
            a, b = root(old), root(new)
            if a != b:
                parent[b] = a
    groups: dict[int, set[int]] = {}
    for t in list(parent):
        groups.setdefault(root(t), set()).add(t)
    families = {}
    for members in groups.values():
        family = frozenset(members)
        families.update(dict.fromkeys(family, family))
    return families


class MatchError(ValueError):
    """A match that cannot replace its region as one statement; the message says why."""


def check_match(view: GraphView, match: Match) -> None:
    """Raise ``MatchError`` unless the match's region can be computed by one statement placed at
    the region's last node: its nodes are unclaimed, every value it makes that anything outside
    it reads is among its outputs, no node outside it between its first and last node reads those
    outputs, writes in place what the region read or wrote before it, or reads what it wrote in
    place, and it writes no tensor in place that something outside it can see."""
    nodes = match.nodes
    if not nodes:
        raise MatchError(f"{match.template}: an empty region")
    if nodes & view.claimed:
        raise MatchError(f"{match.template}: nodes {sorted(nodes & view.claimed)} are claimed by another match")
    last = max(nodes)
    made = {t for i in nodes for t in view.node(i).outputs if t is not None}
    for tid in made:
        outside = [u for u in view.users(tid) if u not in nodes]
        if (outside or tid in view.returned) and tid not in match.outputs:
            raise MatchError(f"{match.template}: tensor {tid} made in the region is read outside it but is not an output")
        if any(u < last for u in outside):
            raise MatchError(f"{match.template}: tensor {tid} is read by node {min(outside)} before the region ends")
    _check_no_write_between(view, match, last)
    missing = set(match.outputs) - made
    if missing:
        raise MatchError(f"{match.template}: outputs {sorted(missing)} are not made in the region")
    for i in nodes:
        for written, new in view.node(i).writes:
            if (written, new) in match.writes:
                continue
            if view.producer.get(written) not in nodes or view.aliased(written):
                raise MatchError(f"{match.template}: node {i} writes tensor {written}, which code outside the region can see")
    for tid in match.outputs:
        viewed = view.viewed_before(tid, min(nodes), made)
        if viewed is not None:
            raise MatchError(f"{match.template}: output {tid} is a view of tensor {viewed}, made before the region (its kernel writes fresh memory)")


def _check_no_write_between(view: GraphView, match: Match, last: int) -> None:
    """Refuse a region whose statement, run at its last node, would move a read or an in-place
    write of memory past a node outside it between its nodes that writes that memory in place
    (``t = tanh(h); h.mul_(0.5); t + h``: the chain's tanh would see the halved ``h``) or reads
    what the region wrote (a training BatchNorm's running mean read before the ReLU after it)."""
    read: dict[int, int] = {}  # storage -> the first region node that read it
    wrote: dict[int, int] = {}  # storage -> the first region node that wrote it in place
    for i in range(min(match.nodes), last):
        node = view.node(i)
        if i in match.nodes:
            for storage in view.storages(view.reads(i)):
                read.setdefault(storage, i)
            for storage in view.storages(view.written(i)):
                wrote.setdefault(storage, i)
            continue
        found = view.hazard(node, read, wrote)
        if found is None:
            continue
        kind, storage, t = found
        if kind == "writes":
            raise MatchError(f"{match.template}: node {i} writes in place memory that node {read.get(storage, wrote.get(storage))} of the region read or wrote before it")
        raise MatchError(f"{match.template}: node {i} reads tensor {t} after node {wrote[storage]} of the region wrote its memory in place")


#: The registered templates, by name.
TEMPLATES: dict[str, Template] = {}


def register(template: Template) -> Template:
    """Add a template to the registry (its name must be new)."""
    if template.name in TEMPLATES:
        raise ValueError(f"a template named {template.name!r} is already registered")
    TEMPLATES[template.name] = template
    return template


def ordered(names: list[str] | None = None) -> list[Template]:
    """The registered templates (or those named), lowest priority value first."""
    chosen = [TEMPLATES[n] for n in names if n in TEMPLATES] if names is not None else list(TEMPLATES.values())
    return sorted(chosen, key=lambda t: (t.priority, t.name))


def laid_out(graph: OpGraph, match: Match, names: Namer) -> list[str]:
    """``match``'s statements, then each output the trace saw in another layout than row-major
    (an attention's output over (batch, length, heads), a convolution's of a channels-last input)
    copied into that layout where its kernel wrote row-major memory: the replay's later views and
    the compiled replay's fake results assume the traced strides (a ``contiguous()`` that copied
    nothing in the trace is not in the replay, and the ``view`` after it failed on an attention
    kernel's output)."""
    lines = match.emit(names)
    for tid in match.outputs:
        info = graph.tensors[tid]
        if not info.contiguous and dense_order(info.shape, info.stride) is not None:
            name = names.read(tid)
            lines.append(f"{name} = _kl_strided({name}, {tuple(info.stride)!r})")
    return lines


def nbytes(info: TensorInfo) -> int:
    """The bytes of one tensor value."""
    return info.numel * DTYPE_BYTES.get(info.dtype, 4)
