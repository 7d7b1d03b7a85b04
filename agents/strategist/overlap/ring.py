"""A ring loop whose exchange is a plain ring shift, with every shift served by one push of each
rank's blocks to every peer (``kernels/comm/ring_kv.py``): a source rewrite.

The loop is found as ``prefetch/`` finds one (a ``for`` over ``range`` whose body passes its
carried state on with ``A, B = F(A, B)`` and nothing else writes the state or communicates), and
``F`` must be, statement for statement, a ring shift under any alias of ``torch.distributed``:

    rank, world = dist.get_rank(), dist.get_world_size()       # or two assignments
    a_next, b_next = torch.empty_like(a), torch.empty_like(b)   # one fresh buffer per argument
    ops = [P2POp(isend, a, (rank + 1) % world), P2POp(irecv, a_next, (rank - 1) % world), ...]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return a_next, b_next                                       # in the arguments' order

(default group, each argument sent once to the next rank, each buffer received once from the
previous). After j such shifts the state is the one rank ``rank - j`` held, so the j-th call can
return that rank's blocks as soon as they arrive: ``F(A, B)`` becomes ``_kl_ringN.take(F, A, B)``
with ``_kl_ringN = _KloomRing()`` before the loop (``runtime.py``), which on the first take pushes
this rank's state to every peer with the copy engines and then waits for each block only when it
is taken. Outside the kernel's envelope it calls ``F`` itself.
"""

from __future__ import annotations

import ast

from ..prefetch.detect import ExchangeModule, functions_in, loop_exchange, params_of, walk_scope
from ..rewrites import apply_rewriter, is_module_call, module_aliases


def _is_dist_attr(node: ast.AST, name: str, module: ExchangeModule) -> bool:
    """``dist.isend`` (any alias), or a name imported from torch.distributed as ``isend``."""
    if isinstance(node, ast.Attribute):
        return node.attr == name and ast.unparse(node.value) in module.modules
    return isinstance(node, ast.Name) and module.functions.get(node.id) == name


def _shift(expr: ast.AST, rank: str, world: str, sign: int) -> bool:
    """``(rank + 1) % world`` (sign 1) or ``(rank - 1) % world`` / ``(rank + world - 1) % world`` (sign -1)."""
    if not (isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod) and isinstance(expr.right, ast.Name) and expr.right.id == world):
        return False
    text = ast.unparse(expr.left).replace(" ", "")
    wanted = {1: {f"{rank}+1"}, -1: {f"{rank}-1", f"{rank}+{world}-1"}}[sign]
    return text in wanted


def _pairs(stmt: ast.stmt) -> list[tuple[ast.expr, ast.expr]]:
    """(target, value) of ``a = x`` or ``a, b = x, y``."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return []
    target, value = stmt.targets[0], stmt.value
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
        return list(zip(target.elts, value.elts))
    return [(target, value)]


def is_ring_shift(fn: ast.FunctionDef, module: ExchangeModule, torch_names) -> bool:
    """Whether ``fn`` is exactly the ring shift of the module's docstring."""
    args = fn.args
    params = params_of(fn)
    if not params or args.vararg or args.kwarg or args.kwonlyargs or args.defaults or fn.decorator_list:
        return False
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str))]
    rank = world = ops = None
    buffers: dict[str, str] = {}  # buffer -> the parameter it is shaped like
    sent: dict[str, int] = {}
    received: dict[str, int] = {}
    waited = False
    for i, stmt in enumerate(body):
        if i == len(body) - 1:
            if not (isinstance(stmt, ast.Return) and stmt.value is not None):
                return False
            out = stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]
            names = [e.id if isinstance(e, ast.Name) else None for e in out]
            return waited and names == [b for p in params for b, q in buffers.items() if q == p] and len(names) == len(params)
        pairs = _pairs(stmt)
        if pairs and all(isinstance(t, ast.Name) for t, _ in pairs):
            for target, value in pairs:
                if isinstance(value, ast.Call) and module.is_dist(value, "get_rank") and not value.args:
                    rank = target.id
                elif isinstance(value, ast.Call) and module.is_dist(value, "get_world_size") and not value.args:
                    world = target.id
                elif (
                    isinstance(value, ast.Call) and is_module_call(value, "empty_like", *torch_names)
                    and len(value.args) == 1 and not value.keywords and isinstance(value.args[0], ast.Name) and value.args[0].id in params
                ):  # fmt: skip
                    buffers[target.id] = value.args[0].id
                elif isinstance(value, ast.List) and ops is None and rank and world:
                    ops = target.id
                    for op in value.elts:
                        if not (isinstance(op, ast.Call) and module.is_dist(op, "P2POp") and len(op.args) == 3 and not op.keywords):
                            return False
                        kind, tensor, peer = op.args
                        if not isinstance(tensor, ast.Name):
                            return False
                        if _is_dist_attr(kind, "isend", module) and tensor.id in params and _shift(peer, rank, world, 1):
                            sent[tensor.id] = sent.get(tensor.id, 0) + 1
                        elif _is_dist_attr(kind, "irecv", module) and tensor.id in buffers and _shift(peer, rank, world, -1):
                            received[tensor.id] = received.get(tensor.id, 0) + 1
                        else:
                            return False
                    if sorted(sent) != sorted(params) or set(sent.values()) != {1} or sorted(received) != sorted(buffers) or set(received.values()) != {1}:
                        return False
                else:
                    return False
            continue
        if (
            isinstance(stmt, ast.For) and ops and isinstance(stmt.target, ast.Name) and not stmt.orelse and len(stmt.body) == 1
            and isinstance(stmt.iter, ast.Call) and module.is_dist(stmt.iter, "batch_isend_irecv")
            and [ast.unparse(a) for a in stmt.iter.args] == [ops]
            and ast.unparse(stmt.body[0]).replace(" ", "") == f"{stmt.target.id}.wait()"
        ):  # fmt: skip
            waited = True
            continue
        return False
    return False


class _Rewriter:
    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.count = 0

    def run(self) -> None:
        module = ExchangeModule(self.tree)
        torch_names = module_aliases(self.tree, "torch")
        shifts = {name for name in module.exchanges if is_ring_shift(module.defs[name], module, torch_names)}
        if not shifts:
            return
        for function in list(functions_in(self.tree)):
            if function.name in module.exchanges:
                continue
            parents = {id(c): n for n in ast.walk(function) for c in ast.iter_child_nodes(n)}
            for loop in [n for n in walk_scope(function) if isinstance(n, ast.For)]:
                ex = loop_exchange(loop, function, module)
                if ex is None or ex.fn not in shifts:
                    continue
                helper = f"_kl_ring{self.count}"
                self.count += 1
                ex.call.args = [ast.Name(ex.fn, ast.Load())] + ex.call.args
                ex.call.func = ast.Attribute(ast.Name(helper, ast.Load()), "take", ast.Load())
                owner = parents[id(loop)]
                block = next(b for f in ("body", "orelse", "finalbody") if isinstance(b := getattr(owner, f, None), list) and loop in b)
                make = ast.Assign([ast.Name(helper, ast.Store())], ast.Call(ast.Name("_KloomRing", ast.Load()), [], []))
                block.insert(block.index(loop), ast.copy_location(make, loop))


def ring_exchange(source: str) -> tuple[str, int]:
    """The source with each ring loop whose exchange is a plain ring shift served by pushed
    blocks; returns it and the number of loops rewritten (0: unchanged)."""
    return apply_rewriter(source, _Rewriter)
