"""Elementwise chains in the op graph, compiled to the kernels' elementwise program.

``follow(view, start, ...)`` grows, from the value ``start``, the longest run of elementwise
nodes (``lowering.py``) that keep ``start``'s shape and read, besides values of the run, only
tensors that do not depend on it (the operands: per-channel biases, masks, other inputs). A
kernel computes ``start`` (a reduction's result, a normalised row, a GEMM tile) or loads it, then
applies the chain's program before it stores: the chain's intermediates never reach memory.

This is the piece other templates share: a GEMM template calls ``follow`` on its product to get
its epilogue (``Chain.program``/``scalars``/``operands``), and its kernel runs ``ew_run`` from
``kernels/elementwise/program.py`` on the accumulator with the operands loaded by ``ew_load``.
"""

from __future__ import annotations

import math

from dataclasses import dataclass

from kernels.elementwise.opcodes import EW_MAX_OPERANDS, EW_OPERAND, EW_OPS, EW_REGISTERS, EW_SCALAR

from .lowering import FLOAT_DTYPES, ROUNDING, MicroOp, lower
from .templates import GraphView


@dataclass(frozen=True)
class Chain:
    """A run of elementwise nodes compiled to one program."""

    start: int  # the tensor id flowing in (the program's registers start as it)
    nodes: frozenset[int]
    output: int  # the tensor id of the chain's result
    operands: tuple[int, ...]  # tensor ids the kernel loads as operands 0.. (by the output's flat index)
    program: tuple[int, ...]
    scalars: tuple[float, ...]
    dtype: str  # the result's dtype

    @property
    def steps(self) -> int:
        return len(self.program) // 4


def scalars_code(scalars: tuple[float, ...]) -> str:
    """A program's scalars as Python source (``float('-inf')`` for an infinity, whose repr is
    no literal: a masked fill's ``-inf``, a clamp without a bound)."""
    text = [repr(v) if math.isfinite(v) else f"float('{v}')" for v in scalars]
    return f"({', '.join(text)}{',' if len(text) == 1 else ''})"


def _depends_on(view: GraphView, tid, values: set, memo: dict) -> bool:
    """Whether tensor ``tid`` is computed from any of ``values``."""
    if tid in values:
        return True
    if tid in memo:
        return memo[tid]
    memo[tid] = False
    producer = view.producer.get(tid)
    if producer is not None:
        memo[tid] = any(_depends_on(view, t, values, memo) for t in view.reads(producer))
    return memo[tid]


def follow(
    view: GraphView, start: int, *, operands: tuple[int, ...] = (), owned: bool = True, first: int = 0, max_nodes: int = 64
) -> Chain | None:
    """The elementwise chain that continues from ``start``, or None when no node does.

    ``operands``: tensors the kernel already loads as operands (a standalone chain loads its
    ``start`` as operand 0). ``owned``: every reader of ``start`` must be in the chain (it is
    made by the same kernel, which will not store it); otherwise ``start`` is read from memory,
    and other readers of it alone are passed by. ``first``: the first node the chain may take."""
    shape = view.tensor(start).shape
    values = {start}
    nodes: list[int] = []
    side: set[int] = set()  # nodes of side branches (``_side_branches``), before their reader in ``nodes``
    memo: dict = {}
    # A start read from memory may feed the operands too (``x / norm(x)``); one the kernel makes may not.
    made = values if owned else set()
    # The kernel runs at the chain's last node: a node before it that writes in place memory the
    # region read (its start, its operands; an owned start's producer's inputs) or the producer
    # wrote, or reads memory the producer wrote in place (a training batch norm's running
    # statistics), ends the chain (``GraphView.hazard``, which ``check_match`` asks too).
    # An owned start is never in memory: a node that writes it in place (``relu_`` after a norm)
    # may join the chain when nothing else shares its memory.
    loaded, wrote = (set() if owned and not view.aliased(start) else view.storages([start])), set()
    if owned and start in view.producer:
        producer = view.node(view.producer[start])
        loaded |= view.storages(view.reads(producer.index))
        wrote = view.storages(view.written(producer.index))
    # The last node that reads a value of the chain: none after it can join.
    horizon = max(view.users(start), default=-1)
    for node in view.graph.nodes[max(view.producer.get(start, -1) + 1, first) :]:
        if node.index > horizon or len(nodes) >= max_nodes or view.hazard(node, loaded, wrote) is not None:
            break
        if not view.free(node.index):
            continue
        reads = view.reads(node.index)
        touched = [t for t in reads if t in values]
        if not touched:
            continue
        out = node.outputs[0] if node.outputs else None
        ops = lower(node, lambda t: view.tensor(t).dtype)
        foreign_write = any(old not in values or (old == start and not owned) or view.aliased(old) for old, _ in node.writes)
        if ops is None or out is None or foreign_write or view.tensor(out).shape != shape or any(
            t not in values and _depends_on(view, t, made, memo) for t in reads
        ):
            if owned or any(t != start for t in touched):
                break  # the chain cannot go past a node that needs its values but cannot join it
            continue
        # A value read only here, made by elementwise nodes from tensors the kernel can load, is
        # computed in the kernel too (``tanh(a) * sigmoid(b)``: the sigmoid's write and read go).
        taken = _side_branches(view, node, values, shape, made, memo, max_nodes - len(nodes) - 1)
        if taken and len(_loads(view, nodes + taken + [node.index], values, operands)) > EW_MAX_OPERANDS:
            taken = []  # its loads would not fit the program's operands: the value is loaded instead
        nodes += taken + [node.index]
        side.update(taken)
        loaded |= view.storages(t for i in taken for t in view.reads(i))
        loaded |= view.storages(t for t in reads if t not in values)
        values.add(out)
        values.update(new for _, new in node.writes)
        horizon = max([horizon, *view.users(out), *(u for _, new in node.writes for u in view.users(new))])
        made = values if owned else values - {start}
        memo.clear()
    return _best_prefix(view, start, nodes, operands, owned, side)


#: Nodes a side branch may hold (its loads count against the program's four operands anyway).
SIDE_MAX_NODES = 8


def _loads(view: GraphView, nodes: list[int], values: set, operands: tuple[int, ...]) -> set[int]:
    """The tensors a program of ``nodes`` loads: ``operands`` and what the nodes read that neither
    they nor the chain make (``values``)."""
    made = set(values) | {t for i in nodes for t in view.node(i).outputs if t is not None}
    return set(operands) | {t for i in nodes for t in view.reads(i) if t not in made}


def _side_branches(view: GraphView, node, values: set, shape: tuple, made: set, memo: dict, budget: int) -> list[int]:
    """The nodes, in graph order, of the side branches of chain node ``node``: for each tensor it
    reads from outside the chain, the free elementwise nodes that make it (and what they read,
    recursively) when ``node`` is that value's only reader, nothing it reads depends on the chain,
    it broadcasts to the chain's ``shape``, and nothing between writes what they read: the kernel
    computes them from loaded operands where ``node`` runs. Empty when there are none."""
    taken: list[int] = []
    for tid in view.reads(node.index):
        if tid not in values:
            branch = _side_branch(view, tid, node.index, node.index, shape, made, memo, min(budget, SIDE_MAX_NODES) - len(taken))
            taken += [i for i in branch or () if i not in taken]
    return sorted(taken)


def _side_branch(view: GraphView, tid: int, reader: int, at: int, shape: tuple, made: set, memo: dict, budget: int) -> list[int] | None:
    """The nodes that make ``tid`` for ``reader`` alone (``_side_branches``), computed where the
    chain node ``at`` runs, or None."""
    producer = view.producer.get(tid)
    if producer is None or budget < 1 or not view.free(producer) or tid in view.returned or view.users(tid) != [reader]:
        return None
    node = view.node(producer)
    if node.writes or len(node.outputs) != 1 or lower(node, lambda t: view.tensor(t).dtype) is None:
        return None
    if _broadcast(view.tensor(tid).shape, shape) != tuple(shape) or view.aliased(tid):
        return None
    reads = view.reads(producer)
    if any(_depends_on(view, t, made, memo) for t in reads):
        return None
    # Moved to the chain node: no node between may write what it reads.
    storages = view.storages(reads)
    if any(view.hazard(view.node(i), storages, set()) is not None for i in range(producer + 1, at)):
        return None
    nodes = [producer]
    for t in dict.fromkeys(reads):
        deeper = _side_branch(view, t, producer, at, shape, made, memo, budget - len(nodes))
        nodes += deeper or []
    return nodes


def _best_prefix(view: GraphView, start: int, nodes: list[int], operands, owned: bool, side: set[int] = frozenset()) -> Chain | None:
    """The longest prefix of ``nodes`` whose values, but its last, are read only inside it and
    whose program fits the registers and operands (a prefix never ends in a side branch: its
    value is not the chain's)."""
    while nodes:
        if nodes[-1] not in side:
            chain = compile_nodes(view, start, nodes, operands, owned)
            if chain is not None:
                return chain
        nodes = nodes[:-1]
    return None


def compile_nodes(
    view: GraphView, start: int, nodes: list[int], operands: tuple[int, ...] = (), owned: bool = False, exact: bool = False
) -> Chain | None:
    """The chain of exactly ``nodes`` (in graph order) from ``start``, or None when a value of
    theirs other than the last is read elsewhere, or the program does not fit. ``exact``: every
    low-precision value rounded as the reference rounds it (``_micro_ops``)."""
    members = set(nodes)
    final = view.node(nodes[-1]).outputs[0]
    made = {t for i in nodes for t in view.node(i).outputs if t is not None} | {new for i in nodes for _, new in view.node(i).writes}
    for tid in made | ({start} if owned else set()):
        if tid == final:
            continue
        if tid in view.returned or any(u not in members for u in view.users(tid)):
            return None  # an intermediate read outside the chain would have to be stored
    if view.tensor(final).dtype not in FLOAT_DTYPES:
        return None
    return _allocate(view, start, nodes, final, _micro_ops(view, start, nodes, exact), operands)


def _micro_ops(view: GraphView, start: int, nodes: list[int], exact: bool = False) -> list[MicroOp]:
    """The nodes' micro-ops. A program holds every value in float32 where the reference rounds
    each operator's result to its dtype; that is within a low-precision result's tolerance, but
    not once a chain widens a bfloat16/float16 value (``.float()``, a float32 parameter times it),
    nor where an index is picked from its values (``exact``: an argmax over bfloat16 values, whose
    ties the rounding makes): then ``start`` and every low-precision value the chain makes are
    rounded to their dtype as the reference rounds them (a value loaded from memory is exact already)."""

    def dtype(tid) -> str:
        return view.tensor(tid).dtype

    lowered = [(view.node(i), lower(view.node(i), dtype)) for i in nodes]
    widens = any(dtype(t) in ROUNDING and dtype(node.outputs[0]) != dtype(t) for node, _ in lowered for t in node.tensor_args())
    if not (widens or exact):
        return [op for _, ops in lowered for op in ops]
    rounded = ("rounded", start) if dtype(start) in ROUNDING else start
    micro = [MicroOp(ROUNDING[dtype(start)], rounded, ("tensor", start))] if rounded != start else []

    def read(ref):
        return ("tensor", rounded) if ref == ("tensor", start) else ref

    for node, ops in lowered:
        out = node.outputs[0]
        if dtype(out) not in ROUNDING:
            micro += [MicroOp(op.op, op.out, read(op.a), read(op.b), op.params) for op in ops]
            continue
        raw = ("unrounded", out)
        micro += [MicroOp(op.op, raw if op.out == out else op.out, read(op.a), read(op.b), op.params) for op in ops]
        micro.append(MicroOp(ROUNDING[dtype(out)], out, ("tensor", raw)))
    return micro


def _allocate(view: GraphView, start: int, nodes: list[int], final: int, micro: list[MicroOp], operands) -> Chain | None:
    """Registers for the micro-ops' values (each freed after its last read), operand slots for
    the tensors read from outside, scalar slots for constants and parameters."""
    shape = view.tensor(start).shape
    # Versions of a value written in place are the value itself.
    alias = {new: old for i in nodes for old, new in view.node(i).writes}

    def canon(sym):
        while sym in alias:
            sym = alias[sym]
        return sym

    last_read: dict = {}
    for k, op in enumerate(micro):
        for ref in (op.a, op.b):
            if ref is not None and ref[0] == "tensor":
                last_read[canon(ref[1])] = k
    register = {start: 0}
    loaded = list(operands)
    scalars: list[float] = []
    program: list[int] = []

    def reference(ref) -> int | None:
        if ref is None:
            return 0
        if ref[0] == "scalar":
            scalars.append(ref[1])
            return EW_SCALAR + len(scalars) - 1
        sym = canon(ref[1])
        if sym in register:
            return register[sym]
        info = view.graph.tensors.get(sym) if isinstance(sym, int) else None
        if info is None or _broadcast(info.shape, shape) != tuple(shape):
            return None
        if sym not in loaded:
            loaded.append(sym)
        slot = loaded.index(sym)
        return EW_OPERAND + slot if slot < EW_MAX_OPERANDS else None

    for k, op in enumerate(micro):
        a, b = reference(op.a), reference(op.b)
        if a is None or b is None:
            return None
        if op.params:
            b = EW_SCALAR + len(scalars)
            scalars.extend(op.params)
        live = {r for sym, r in register.items() if last_read.get(sym, -1) > k}
        free = [r for r in range(EW_REGISTERS) if r not in live]
        if not free:
            return None
        dst = free[0]
        register = {sym: r for sym, r in register.items() if r != dst}
        register[canon(op.out)] = dst
        program += [EW_OPS[op.op].code, dst, a, b]
    if register[canon(final)] != 0:
        program += [EW_OPS["copy"].code, 0, register[canon(final)], 0]
    return Chain(
        start=start,
        nodes=frozenset(nodes),
        output=final,
        operands=tuple(loaded),
        program=tuple(program),
        scalars=tuple(scalars),
        dtype=view.tensor(final).dtype,
    )


def _broadcast(a: tuple, b: tuple) -> tuple | None:
    """The broadcast shape of ``a`` and ``b``, or None when they do not broadcast."""
    out = []
    for x, y in zip((1,) * (len(b) - len(a)) + tuple(a), (1,) * (len(a) - len(b)) + tuple(b)):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(out)
