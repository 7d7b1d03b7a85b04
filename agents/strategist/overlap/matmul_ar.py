"""A matmul whose product is all-reduced, as one call of the GEMM + all-reduce kernel: a source
rewrite on the reference's syntax tree.

Found by structure, in one statement block of a function:

    y = a @ b                      # or torch.matmul(a, b), or F.linear(a, w) without bias
    [z = y.clone()]                # optionally: the all-reduce works on a copy
    dist.all_reduce(z)             # sum (default or explicit), default group, synchronous

becomes ``y = _KloomProduct('mm', a, b)`` (which answers shape questions without computing; its
``clone()`` is the same pending product) and ``z = _kloom_matmul_ar(z)``, which returns the
reduced product (``runtime.py``). Between the two, statements must be safe to move the matmul
across (``fused_matmul``'s rules: assignments to plain names that mention neither operand, no
in-place method, no ``out=``, no collective) and may read the product only for its shape, dtype or
device; the product (and its copy, before the all-reduce) may be read nowhere else in the function.
The all-reduce rebinds the reduced name, so it must be a plain local name.
"""

from __future__ import annotations

import ast

from ..fused_matmul.detect import Finder, inside, loads_of, metadata_use, parents_of
from ..rewrites import apply_rewriter, statement_blocks


def sum_all_reduce(finder: Finder, stmt: ast.stmt) -> ast.Call | None:
    """``all_reduce(name[, SUM])`` of a plain name, with nothing else (default group,
    synchronous), as a statement; else None."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and finder.is_dist(stmt.value, "all_reduce")):
        return None
    call = stmt.value
    if not (1 <= len(call.args) <= 2) or any(isinstance(a, ast.Starred) for a in call.args) or not isinstance(call.args[0], ast.Name):
        return None
    kw = {k.arg: k.value for k in call.keywords}
    if set(kw) - {"op"} or (len(call.args) == 2 and kw):
        return None
    op = call.args[1] if len(call.args) == 2 else kw.get("op")
    return call if op is None or finder.is_sum(op) else None


def _clone_of(stmt: ast.stmt, name: str) -> str | None:
    """``z = name.clone()``: z."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    value = stmt.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "clone" and not value.args and not value.keywords:
        if isinstance(value.func.value, ast.Name) and value.func.value.id == name and stmt.targets[0].id != name:
            return stmt.targets[0].id
    return None


class _Rewriter:
    def __init__(self, tree: ast.Module):
        self.finder = Finder(tree)
        self.tree = tree
        self.count = 0

    def run(self) -> None:
        for func in [n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            parents = parents_of(func)
            for _, _, block in list(statement_blocks(func)):
                self.block(func, block, parents)

    def block(self, func, block: list[ast.stmt], parents) -> None:
        for i, stmt in enumerate(block):
            found = self.finder.product(stmt)
            if found is None:
                continue
            y, kind, a, b = found
            avoid = names = {n.id for n in ast.walk(a) if isinstance(n, ast.Name)} | {n.id for n in ast.walk(b) if isinstance(n, ast.Name)}
            if y in names:
                continue
            self.pair(func, block, i, y, kind, a, b, avoid, parents)

    def pair(self, func, block, i, y, kind, a, b, avoid, parents) -> None:
        current, clone_stmt = y, None
        allowed: set[int] = set()
        for j in range(i + 1, len(block)):
            stmt = block[j]
            call = sum_all_reduce(self.finder, stmt)
            if call is not None and call.args[0].id == current:
                allowed.add(id(call.args[0]))
                if clone_stmt is not None:
                    allowed.add(id(clone_stmt.value.func.value))
                if not self._only_uses(func, y, current, allowed, block[i], stmt, parents):
                    return
                block[i] = ast.copy_location(ast.Assign([ast.Name(y, ast.Store())], ast.Call(ast.Name("_KloomProduct", ast.Load()), [ast.Constant(kind), a, b], [])), block[i])
                op = [ast.keyword("op", call.args[1])] if len(call.args) == 2 else [k for k in call.keywords if k.arg == "op"]
                block[j] = ast.copy_location(
                    ast.Assign([ast.Name(current, ast.Store())], ast.Call(ast.Name("_kloom_matmul_ar", ast.Load()), [ast.Name(current, ast.Load())], op)), stmt
                )
                self.count += 1
                return
            alias = _clone_of(stmt, current) if clone_stmt is None else None
            if alias is not None and alias not in avoid:
                clone_stmt, current = stmt, alias
                continue
            uses = [n for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id in (y, current)]
            if not self.finder.neutral(stmt, avoid) or not all(metadata_use(n, parents) for n in uses):
                return
            if any(isinstance(t, ast.Name) and t.id in (y, current) and isinstance(t.ctx, ast.Store) for t in ast.walk(stmt)):
                return
            allowed |= {id(n) for n in uses}

    @staticmethod
    def _only_uses(func, y: str, current: str, allowed: set[int], first: ast.stmt, last: ast.stmt, parents) -> bool:
        """Between the matmul and the all-reduce the product and its copy are read only where
        allowed; a copied product is read nowhere else (it stays pending); nothing reads either
        from a nested function (which could run in between)."""
        nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
        for name in {y, current}:
            for n in loads_of(func, name):
                if id(n) in allowed:
                    continue
                if inside(n, func, parents, nested):
                    return False
                between = first.lineno <= n.lineno <= last.end_lineno
                if between or (name == y and current != y):
                    return False
        return True


def matmul_all_reduce(source: str) -> tuple[str, int]:
    """The source with each matmul whose product is all-reduced routed through the GEMM +
    all-reduce helper; returns it and the number of pairs rewritten (0: unchanged)."""
    return apply_rewriter(source, _Rewriter)
