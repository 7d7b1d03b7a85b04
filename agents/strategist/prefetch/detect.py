"""Finding the loops whose carried state a point-to-point exchange passes on (the ``prefetch``
strategy's detection; ``__init__.py`` rewrites what this finds, and the overlap strategy's
``ring.py`` finds its loops the same way)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..rewrites import DistCalls

#: Point-to-point calls of ``torch.distributed`` that make a function an exchange.
P2P_CALLS = ("send", "recv", "isend", "irecv", "batch_isend_irecv", "P2POp")
#: The receiving ones, and the position of the buffer they receive into.
_RECV = ("recv", "irecv")

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_GUARD_NODES = (
    ast.Name, ast.Constant, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.Load,
    ast.cmpop, ast.boolop, ast.unaryop, ast.operator,
)


def walk_scope(node: ast.AST, *, into_loops: bool = True):
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
    for n in walk_scope(node):
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


def params_of(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.posonlyargs + fn.args.args]


@dataclass
class _Exchange:
    fn: str
    state: list[str]
    stmt: ast.stmt  # the top-level statement of the loop body: the assignment or its guard
    call: ast.Call
    guard: ast.expr | None


class ExchangeModule(DistCalls):
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
        for call in (n for n in walk_scope(fn) if isinstance(n, ast.Call)):
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
        nodes = list(walk_scope(fn))
        if not any(isinstance(n, ast.Call) and self.is_dist(n, P2P_CALLS) for n in nodes):
            return False
        if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in nodes):
            return False
        returns = [n for n in nodes if isinstance(n, ast.Return)]
        received = self._received(fn) - set(params_of(fn))
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
        for n in walk_scope(node):
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
                params = params_of(callee)
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
            for n in walk_scope(stmt):
                if isinstance(n, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and n.value is not None and _root(n.value) in names:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    new = {t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)} - names
                    if new:
                        names |= new
                        changed = True
    return names


def _exchange(stmt: ast.stmt, module: ExchangeModule) -> _Exchange | None:
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


def loop_exchange(loop: ast.For, function: ast.AST, module: ExchangeModule) -> _Exchange | None:
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
    if any(isinstance(n, (ast.Global, ast.Nonlocal)) and set(n.names) & (state | {ex.fn}) for n in walk_scope(function)):
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
        for n in walk_scope(s):
            if isinstance(n, ast.Call) and n is not ex.call and module.communicates(n):
                return None
            if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)):
                return None
        for n in walk_scope(s, into_loops=False):
            if isinstance(n, ast.Break) or (isinstance(n, ast.Continue) and i < index):
                return None
    return ex


def functions_in(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
