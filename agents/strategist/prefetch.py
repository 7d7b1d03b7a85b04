"""Prefetching a loop-carried point-to-point exchange: software pipelining as a source rewrite.

A ring loop (ring attention, ring all-gather by hand) carries state that an exchange passes on:

    for step in range(world):
        if step:
            k, v = pass_along(k, v)        # send k, v on; receive the previous rank's
        out = attend(q, k, v)              # compute with what was received

Each iteration waits for its exchange before it computes, so communication never overlaps
compute. The state after iteration i's exchange is final for the rest of iteration i (nothing else
in the body writes it), so the exchange feeding iteration i + 1 can be issued right there, on a
side CUDA stream, and run while iteration i computes; iteration i + 1 takes its result:

    _kl_prefetch0 = _KloomPrefetch()
    for step in _kl_prefetch0.ahead(range(world)):
        if step:
            k, v = _kl_prefetch0.take(pass_along, k, v)
        if _kl_prefetch0.more and (_kl_prefetch0.upcoming):
            _kl_prefetch0.start(pass_along, k, v)
        out = attend(q, k, v)

``ahead`` iterates one element ahead, so the guard is evaluated for the next iteration's loop value:
the exchange still happens for exactly the iterations it did (``if step:`` -> i >= 1), each issued
one iteration earlier; the last iteration issues none and the first takes nothing prefetched (it
runs its exchange in place). Every rank issues the same exchanges in the same order as the
reference, and the loop may hold no other communication, so nothing can be reordered across ranks.

What the rewrite requires (else it leaves the loop alone), all read from the syntax tree:

- a ``for`` over ``range(...)`` with a plain name as its target, inside a function;
- one statement of its body, at the top level or alone in a top-level ``if`` with no ``else``,
  is ``A, B = F(A, B)`` (or ``A = F(A)``): the targets are exactly the arguments;
- ``F`` is a module-level function whose body performs point-to-point communication
  (``send``/``recv``/``isend``/``irecv``/``batch_isend_irecv``/``P2POp``, under any alias of
  ``torch.distributed``) and returns, in every ``return``, names it received into (fresh buffers,
  not its parameters);
- nothing else in the loop body writes the state: no assignment, ``del``, augmented assignment,
  subscript or attribute store, in-place method (``x.add_()``), ``out=``, distributed call, or
  module-level function that modifies the argument it is given;
- the guard reads only the loop variable, constants and names the loop body does not assign,
  through comparisons and arithmetic (no calls);
- the loop body has no other communication (distributed calls, or calls of functions that
  communicate), no ``break``, ``return`` or ``yield``, and no ``continue`` before the exchange.

At run time (``PREFETCH_HELPER``) on CUDA the side stream first waits for the compute stream (so it
sends finished data), the sent tensors are recorded on the side stream and the received ones on the
compute stream (so the caching allocator reuses neither early), and ``take`` makes the compute
stream wait for the side stream. Without CUDA (gloo on CPU) ``start`` runs the exchange at once,
synchronously, at the place where the GPU would issue it: the same values as the reference, in
the rewritten order, which is what CPU tests check.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .rewrites import DistCalls

#: Point-to-point calls of ``torch.distributed`` that make a function an exchange.
P2P_CALLS = ("send", "recv", "isend", "irecv", "batch_isend_irecv", "P2POp")
#: The receiving ones, and the position of the buffer they receive into.
_RECV = ("recv", "irecv")

#: Appended to a candidate whose loop-carried exchanges were prefetched.
PREFETCH_HELPER = '''
import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree

#: The side stream of each device that prefetched exchanges run on, in the order they are issued.
_kl_prefetch_streams = {}


class _KloomPrefetch:
    """A loop-carried exchange ``state = fn(*state)`` issued one iteration early.

    ``ahead(iterable)`` runs the loop one element ahead: while the body runs, ``more`` says whether
    another iteration follows and ``upcoming`` is its loop value. ``start(fn, *state)`` issues the
    next iteration's exchange (on CUDA on a side stream, else at once); ``take(fn, *state)`` returns
    its result, or runs the exchange in place when none was started (the first exchange)."""

    def __init__(self):
        self.more = False
        self.upcoming = None
        self._pending = None

    def ahead(self, iterable):
        items = iter(iterable)
        for current in items:
            for following in items:
                self.more, self.upcoming = True, following
                break
            else:
                self.more, self.upcoming = False, None
            yield current
            while self.more:
                current = self.upcoming
                for following in items:
                    self.upcoming = following
                    break
                else:
                    self.more, self.upcoming = False, None
                yield current
            return

    def start(self, fn, *args):
        if self._pending is not None:
            raise RuntimeError("kloom prefetch: an exchange was issued twice for one iteration")
        tensors = [t for t in _kl_pytree.tree_leaves(args) if isinstance(t, _kl_torch.Tensor)]
        if not tensors or not all(t.is_cuda for t in tensors) or _kl_torch.compiler.is_compiling():
            # No stream to overlap on: exchange now, synchronously.
            self._pending = (args, fn(*args), None)
            return
        device = tensors[0].device
        side = _kl_prefetch_streams.get(device)
        if side is None:
            side = _kl_prefetch_streams[device] = _kl_torch.cuda.Stream(device=device)
        # Send finished data: the side stream waits for everything the compute stream has queued.
        side.wait_stream(_kl_torch.cuda.current_stream(device))
        with _kl_torch.cuda.stream(side):
            out = fn(*args)
        for t in tensors:
            t.record_stream(side)  # the compute stream may drop them while the side stream sends
        self._pending = (args, out, side)

    def take(self, fn, *args):
        if self._pending is None:
            return fn(*args)
        started, out, side = self._pending
        self._pending = None
        if len(started) != len(args) or any(a is not b for a, b in zip(started, args)):
            raise RuntimeError("kloom prefetch: the state changed after its exchange was issued")
        if side is not None:
            current = _kl_torch.cuda.current_stream(side.device)
            current.wait_stream(side)
            for t in _kl_pytree.tree_leaves(out):
                if isinstance(t, _kl_torch.Tensor) and t.is_cuda:
                    t.record_stream(current)  # allocated on the side stream, used on this one
        return out
'''

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_GUARD_NODES = (
    ast.Name, ast.Constant, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.Load,
    ast.cmpop, ast.boolop, ast.unaryop, ast.operator,
)


def _walk(node: ast.AST, *, into_loops: bool = True):
    """``ast.walk`` from ``node`` that yields nested scopes (functions, lambdas, classes) but does
    not enter them; with ``into_loops`` false, of a loop (``node`` included) only its header and
    its ``else`` (a ``break``/``continue`` in its body is its own, one in its ``else`` is not)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if n is not node and isinstance(n, _SCOPES):
            continue
        if not into_loops and isinstance(n, _LOOPS):
            stack.extend(c for c in ast.iter_child_nodes(n) if isinstance(c, ast.expr))
            stack.extend(n.orelse)
            continue
        stack.extend(ast.iter_child_nodes(n))


def _stored(node: ast.AST) -> set[str]:
    """Names a statement (or expression) binds or deletes in its own scope."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    names = set()
    for n in _walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not node:
            names.add(n.name)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            names |= set(n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
    return names


def _body_stored(function: ast.AST) -> set[str]:
    return set().union(*(_stored(s) for s in function.body))


def _root(node: ast.AST) -> str | None:
    """The name an expression reads through: ``x``, ``x.a``, ``x[i]``, ``x.view(...)``, ``*x``."""
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        else:
            break
    return node.id if isinstance(node, ast.Name) else None


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.posonlyargs + fn.args.args]


@dataclass
class _Exchange:
    fn: str
    state: list[str]
    stmt: ast.stmt  # the top-level statement of the loop body: the assignment or its guard
    call: ast.Call
    guard: ast.expr | None


class _Module(DistCalls):
    """What the rewrite needs to know about the module: its aliases of ``torch.distributed``, its
    module-level functions, which of them communicate, which are exchanges."""

    def __init__(self, tree: ast.Module):
        super().__init__(tree)
        self.tree = tree
        bound: dict[str, int] = {}
        for stmt in tree.body:
            for name in _stored(stmt):
                bound[name] = bound.get(name, 0) + 1
        self.bound = bound
        self.defs = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef) and bound.get(s.name) == 1}
        self.communicating = self._communicating()
        self.exchanges = {name for name, fn in self.defs.items() if self._is_exchange(fn)}

    def _communicating(self) -> set[str]:
        """Names of functions (anywhere in the module, methods included) that call
        ``torch.distributed`` directly or through other such functions."""
        every = [n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for fn in every:
                if fn.name in found:
                    continue
                if any(isinstance(n, ast.Call) and self.communicates(n, found) for n in ast.walk(fn)):
                    found.add(fn.name)
                    changed = True
        return found

    def communicates(self, call: ast.Call, functions: set[str] | None = None) -> bool:
        functions = self.communicating if functions is None else functions
        if self.is_dist(call):
            return True
        f = call.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        return name in functions

    def _is_recv_op(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return self.functions.get(node.id) in _RECV
        return isinstance(node, ast.Attribute) and node.attr in _RECV and ast.unparse(node.value) in self.modules

    def _received(self, fn: ast.FunctionDef) -> set[str]:
        """Names ``fn`` receives into: ``recv(t, ...)``, ``irecv(tensor=t)``, ``P2POp(irecv, t, ...)``."""
        names = set()
        for call in (n for n in _walk(fn) if isinstance(n, ast.Call)):
            buffer = None
            if self.is_dist(call, _RECV):
                buffer = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "tensor"), None)
            elif self.is_dist(call, ("P2POp",)):
                op = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "op"), None)
                if op is not None and self._is_recv_op(op):
                    buffer = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "tensor"), None)
            if isinstance(buffer, ast.Name):
                names.add(buffer.id)
        return names

    def _is_exchange(self, fn: ast.FunctionDef) -> bool:
        nodes = list(_walk(fn))
        if not any(isinstance(n, ast.Call) and self.is_dist(n, P2P_CALLS) for n in nodes):
            return False
        if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in nodes):
            return False
        returns = [n for n in nodes if isinstance(n, ast.Return)]
        received = self._received(fn) - set(_params(fn))
        if not returns or not received:
            return False
        arity = None
        for ret in returns:
            value = ret.value
            elts = value.elts if isinstance(value, ast.Tuple) else [value]
            if not all(isinstance(e, ast.Name) and e.id in received for e in elts):
                return False
            if arity not in (None, len(elts)):
                return False
            arity = len(elts)
        return True

    def mutates(self, node: ast.AST, names: set[str]) -> bool:
        """Whether ``node`` may modify (rather than rebind) a tensor that one of ``names`` holds."""
        for n in _walk(node):
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target]
                for t in targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, (ast.Subscript, ast.Attribute)) and _root(sub) in names:
                            return True
                if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id in names:
                    return True
            if not isinstance(n, ast.Call):
                continue
            f = n.func
            if isinstance(f, ast.Attribute) and _root(f.value) in names and f.attr.endswith("_") and not f.attr.startswith("_"):
                return True  # x.add_(...), x[0].copy_(...)
            passed = {_root(a) for a in n.args} | {_root(k.value) for k in n.keywords}
            if not passed & names:
                continue
            if any(k.arg == "out" and _root(k.value) in names for k in n.keywords):
                return True
            if self.is_dist(n):
                return True  # collectives write into their tensors
            if isinstance(f, ast.Name) and f.id in self.defs:
                callee = self.defs[f.id]
                params = _params(callee)
                given = {params[i] for i, a in enumerate(n.args) if i < len(params) and _root(a) in names}
                given |= {k.arg for k in n.keywords if k.arg and _root(k.value) in names}
                if any(isinstance(a, ast.Starred) for a in n.args) or given - set(params):
                    return True
                if given and self.mutates(ast.Module(callee.body, []), given):
                    return True
        return False


def _aliases(block: list[ast.stmt], state: set[str]) -> set[str]:
    """``state`` and the names the block binds to views of it (``x = k``, ``x = k[0]``,
    ``x = k.view(...)``), transitively: modifying one of those modifies the state."""
    names = set(state)
    changed = True
    while changed:
        changed = False
        for stmt in block:
            for n in _walk(stmt):
                if isinstance(n, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and n.value is not None and _root(n.value) in names:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    new = {t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)} - names
                    if new:
                        names |= new
                        changed = True
    return names


def _exchange(stmt: ast.stmt, module: _Module) -> _Exchange | None:
    """``stmt`` (a top-level statement of a loop body) as a loop-carried exchange, else None."""
    guard = None
    inner = stmt
    if isinstance(stmt, ast.If):
        if len(stmt.body) != 1 or stmt.orelse:
            return None
        guard, inner = stmt.test, stmt.body[0]
    if not (isinstance(inner, ast.Assign) and len(inner.targets) == 1 and isinstance(inner.value, ast.Call)):
        return None
    target, call = inner.targets[0], inner.value
    elts = target.elts if isinstance(target, ast.Tuple) else [target]
    if not elts or not all(isinstance(e, ast.Name) for e in elts):
        return None
    state = [e.id for e in elts]
    if len(set(state)) != len(state) or call.keywords or not isinstance(call.func, ast.Name):
        return None
    if [a.id if isinstance(a, ast.Name) else None for a in call.args] != state:
        return None
    if call.func.id not in module.exchanges:
        return None
    return _Exchange(call.func.id, state, stmt, call, guard)


def _loop_exchange(loop: ast.For, function: ast.AST, module: _Module) -> _Exchange | None:
    """The loop's exchange, if the loop can be pipelined (see the module's docstring)."""
    if not isinstance(loop.target, ast.Name):
        return None
    it = loop.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and "range" not in module.bound):
        return None
    found = [(i, ex) for i, ex in ((i, _exchange(s, module)) for i, s in enumerate(loop.body)) if ex is not None]
    if len(found) != 1:
        return None
    index, ex = found[0]
    var, state = loop.target.id, set(ex.state)
    if var in state or ex.fn in _body_stored(function) or ex.fn in {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}:
        return None
    # Only the exchange writes the state, and nothing rebinds the loop variable.
    rest = [s for s in loop.body if s is not ex.stmt]
    stored = set().union(*(_stored(s) for s in rest)) if rest else set()
    if ex.guard is not None:
        stored |= _stored(ex.guard)
    if (state | {var}) & stored or any(module.mutates(s, _aliases(rest, state)) for s in rest):
        return None
    if any(isinstance(n, (ast.Global, ast.Nonlocal)) and set(n.names) & (state | {ex.fn}) for n in _walk(function)):
        return None
    # The guard: the loop variable and loop-invariant names, no calls.
    if ex.guard is not None:
        nodes = list(ast.walk(ex.guard))
        if not all(isinstance(n, _GUARD_NODES) for n in nodes):
            return None
        if {n.id for n in nodes if isinstance(n, ast.Name)} & (state | stored):
            return None
    # No other communication, no early exit; no continue before the exchange.
    for i, s in enumerate(loop.body):
        for n in _walk(s):
            if isinstance(n, ast.Call) and n is not ex.call and module.communicates(n):
                return None
            if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)):
                return None
        for n in _walk(s, into_loops=False):
            if isinstance(n, ast.Break) or (isinstance(n, ast.Continue) and i < index):
                return None
    return ex


def _functions(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


class _Upcoming(ast.NodeTransformer):
    def __init__(self, var: str, helper: str):
        self.var, self.helper = var, helper

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.var:
            return ast.Attribute(ast.Name(self.helper, ast.Load()), "upcoming", ast.Load())
        return node


def prefetch_exchange(source: str) -> tuple[str, int]:
    """The source with each pipelinable loop's exchange issued one iteration early through
    ``_KloomPrefetch``; returns it and the number of loops rewritten (0: the source unchanged).
    Only the loop header's iterable, the exchange's call and two inserted places change: the rest
    of the file keeps its text."""
    tree = ast.parse(source)
    module = _Module(tree)
    if not module.exchanges:
        return source, 0
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno: int, col: int) -> int:  # col: UTF-8 bytes, as ast gives it
        line = lines[lineno - 1]
        return starts[lineno - 1] + len(line.encode()[:col].decode(errors="ignore"))

    edits: list[tuple[int, int, str]] = []
    count = 0
    for function in _functions(tree):
        if function.name in module.exchanges:
            continue
        for loop in (n for n in _walk(function) if isinstance(n, ast.For)):
            ex = _loop_exchange(loop, function, module)
            if ex is None:
                continue
            body = loop.body
            # One statement per line where the rewrite inserts, and a body on its own lines.
            if body[0].lineno == loop.lineno or any(
                o is not ex.stmt and o.lineno <= ex.stmt.end_lineno and o.end_lineno >= ex.stmt.lineno for o in body
            ):
                continue
            helper = f"_kl_prefetch{count}"
            count += 1
            indent = lines[loop.lineno - 1][: len(lines[loop.lineno - 1]) - len(lines[loop.lineno - 1].lstrip())]
            body_line = lines[ex.stmt.lineno - 1]
            body_indent = body_line[: len(body_line) - len(body_line.lstrip())]
            step = body_indent[len(indent):] or "    "
            state = ", ".join(ex.state)
            # The helper, before the loop.
            edits.append((starts[loop.lineno - 1], starts[loop.lineno - 1], f"{indent}{helper} = _KloomPrefetch()\n"))
            # The loop runs one element ahead.
            a, b = offset(loop.iter.lineno, loop.iter.col_offset), offset(loop.iter.end_lineno, loop.iter.end_col_offset)
            edits.append((a, b, f"{helper}.ahead({source[a:b]})"))
            # The exchange takes what the previous iteration started.
            a, b = offset(ex.call.lineno, ex.call.col_offset), offset(ex.call.end_lineno, ex.call.end_col_offset)
            edits.append((a, b, f"{helper}.take({ex.fn}, {state})"))
            # And starts the next iteration's, under the guard evaluated for the next loop value.
            condition = f"{helper}.more"
            if ex.guard is not None:
                upcoming = _Upcoming(loop.target.id, helper).visit(ast.parse(ast.unparse(ex.guard), mode="eval").body)
                condition += f" and ({ast.unparse(upcoming)})"
            after = starts[ex.stmt.end_lineno]
            prefix = "" if source[:after].endswith("\n") else "\n"
            edits.append((after, after, f"{prefix}{body_indent}if {condition}:\n{body_indent}{step}{helper}.start({ex.fn}, {state})\n"))
    if not count:
        return source, 0
    out = source
    # From the end, and at one place the later edit first, so that the earlier one ends up before it.
    for _, a, b, text in sorted(((i, a, b, t) for i, (a, b, t) in enumerate(edits)), key=lambda e: (e[1], e[2], e[0]), reverse=True):
        out = out[:a] + text + out[b:]
    ast.parse(out)  # the rewrite keeps the file valid
    return out, count
