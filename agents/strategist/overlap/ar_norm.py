"""An all-reduce followed by a residual add and an RMSNorm, as one call of the fused kernel: a
source rewrite on the reference's syntax tree.

Found by structure, in one statement block of a function:

    dist.all_reduce(h)                        # sum, default group, synchronous; h a plain name
    h += r                                    # optional: h = h + r, h = r + h, h.add_(r)
    ...                                       # statements that leave h alone
    hf = h.float()                            # optional: or h.to(torch.float32)
    ... E ...                                 # E = X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + eps)

where X is ``hf`` or ``h.float()`` (the norm is taken in float32), the square may be written
``X.pow(2)``, ``X ** 2``, ``X * X`` or ``X.square()``, the mean ``.mean(-1, keepdim=True)`` or
with ``dim=-1``, the reciprocal root ``torch.rsqrt(v)`` or ``v.rsqrt()``, and ``+ eps`` also as
``.add(eps)``. The all-reduce and the add become ``_kl_normN = _kloom_ar_add_rmsnorm(h, r, eps)``,
which updates ``h`` in place (so every alias of it sees what the reference's in-place calls did)
and returns the norm in float32; E becomes ``_kl_normN``; everything else keeps its text.

What makes it safe: between the all-reduce and E nothing writes ``h`` or ``hf`` (no assignment
but the one upcast, no in-place method, no ``out=``, no collective, no compound statement), the
names ``eps`` and ``r`` read are not assigned in between (they are evaluated earlier than in the
reference), and E is evaluated unconditionally in its statement.
"""

from __future__ import annotations

import ast

from ..fused_matmul.detect import CONDITIONAL, Finder, inside, loads_of, parents_of, stores_of
from ..rewrites import apply_rewriter, is_module_call, module_aliases, names_in, statement_blocks
from .matmul_ar import sum_all_reduce


def _is_upcast(node: ast.AST, h: str) -> bool:
    """``h.float()`` or ``h.to(torch.float32)`` (any spelling of the dtype ending in float32)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and node.func.value.id == h):
        return False
    if node.func.attr == "float" and not node.args and not node.keywords:
        return True
    if node.func.attr == "to" and len(node.args) == 1 and not node.keywords:
        return ast.unparse(node.args[0]).endswith("float32")
    return False


class _NormMatcher:
    """Recognises E(X) = X * rsqrt(mean(X^2, -1, keepdim=True) + eps); returns eps."""

    def __init__(self, torch_modules: tuple[set[str], dict[str, str]], is_x):
        self.torch, self.is_x = torch_modules, is_x

    def square(self, node) -> bool:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and self.is_x(node.left) and isinstance(node.right, ast.Constant) and node.right.value == 2:
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and self.is_x(node.left) and self.is_x(node.right):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and self.is_x(node.func.value):
            if node.func.attr == "pow" and len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Constant) and node.args[0].value == 2:
                return True
            if node.func.attr == "square" and not node.args and not node.keywords:
                return True
        return False

    def mean(self, node) -> bool:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "mean" and self.square(node.func.value)):
            return False
        kw = {k.arg: k.value for k in node.keywords}
        dims = node.args + ([kw.pop("dim")] if "dim" in kw else [])
        keep = kw.pop("keepdim", None)
        return (
            len(dims) == 1 and not kw and ast.unparse(dims[0]) in ("-1", "(-1,)", "[-1]")
            and isinstance(keep, ast.Constant) and keep.value is True
        )  # fmt: skip

    def variance_plus_eps(self, node) -> ast.expr | None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            if self.mean(node.left):
                return node.right
            if self.mean(node.right):
                return node.left
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add" and len(node.args) == 1 and not node.keywords:
            if self.mean(node.func.value):
                return node.args[0]
        return None

    def rsqrt(self, node) -> ast.expr | None:
        if isinstance(node, ast.Call) and is_module_call(node, "rsqrt", *self.torch) and len(node.args) == 1 and not node.keywords:
            return self.variance_plus_eps(node.args[0])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "rsqrt" and not node.args and not node.keywords:
            return self.variance_plus_eps(node.func.value)
        return None

    def norm(self, node) -> ast.expr | None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            if self.is_x(node.left):
                return self.rsqrt(node.right)
            if self.is_x(node.right):
                return self.rsqrt(node.left)
        return None


class _Rewriter:
    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.finder = Finder(tree)
        self.torch = module_aliases(tree, "torch")
        self.count = 0

    def run(self) -> None:
        for func in [n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            self.func = func
            parents = parents_of(func)
            for _, _, block in list(statement_blocks(func)):
                i = 0
                while i < len(block):
                    if not self.at(block, i, parents):
                        i += 1

    @staticmethod
    def _residual(stmt, h: str) -> ast.expr | None:
        """The r of ``h += r``, ``h = h + r``, ``h = r + h`` or ``h.add_(r)``."""
        r = None
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == h and isinstance(stmt.op, ast.Add):
            r = stmt.value
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == h:
            v = stmt.value
            if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add):
                r = v.right if isinstance(v.left, ast.Name) and v.left.id == h else v.left if isinstance(v.right, ast.Name) and v.right.id == h else None
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            f = stmt.value.func
            if isinstance(f, ast.Attribute) and f.attr == "add_" and isinstance(f.value, ast.Name) and f.value.id == h and len(stmt.value.args) == 1 and not stmt.value.keywords:
                r = stmt.value.args[0]
        return r if r is not None and h not in names_in(r) and not any(isinstance(n, (ast.Call, ast.NamedExpr)) for n in ast.walk(r)) else None

    def at(self, block: list[ast.stmt], i: int, parents) -> bool:
        call = sum_all_reduce(self.finder, block[i])
        if call is None:
            return False
        h = call.args[0].id
        j = i + 1
        residual = self._residual(block[j], h) if j < len(block) else None
        if residual is not None:
            j += 1
        upcast = None  # the name bound to h.float(), once seen
        assigned: set[str] = set()
        for k in range(j, len(block)):
            stmt = block[k]
            is_x = lambda e: (isinstance(e, ast.Name) and e.id == upcast) or _is_upcast(e, h)  # noqa: E731
            matcher = _NormMatcher(self.torch, is_x)
            for node in ast.walk(stmt):
                eps = matcher.norm(node) if isinstance(node, ast.BinOp) else None
                if eps is None:
                    continue
                reads = names_in(eps) | (names_in(residual) if residual is not None else set())
                if reads & assigned or inside(node, stmt, parents, CONDITIONAL) or self.finder.has_collective(stmt):
                    return False
                return self.rewrite(block, i, j, k, h, residual, eps, node, parents)
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) and _is_upcast(stmt.value, h) and upcast is None:
                upcast = stmt.targets[0].id
                assigned.add(upcast)
                continue
            if not self.finder.neutral(stmt, {h} | ({upcast} if upcast else set())):
                return False
            assigned |= {t.id for t in ast.walk(stmt) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
        return False

    def rewrite(self, block, i, j, k, h, residual, eps, norm_node, parents) -> bool:
        name = f"_kl_norm{self.count}"
        args = [ast.Name(h, ast.Load()), residual if residual is not None else ast.Constant(None), eps]
        call = ast.Call(ast.Name("_kloom_ar_add_rmsnorm", ast.Load()), args, [])
        parent = parents[id(norm_node)]
        for field, value in ast.iter_fields(parent):
            if value is norm_node:
                setattr(parent, field, ast.copy_location(ast.Name(name, ast.Load()), norm_node))
            elif isinstance(value, list):
                for idx, item in enumerate(value):
                    if item is norm_node:
                        value[idx] = ast.copy_location(ast.Name(name, ast.Load()), norm_node)
        block[i] = ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], call), block[i])
        del block[i + 1 : j]
        self.count += 1
        self.epilogue(block, i, name, h)
        return True

    def epilogue(self, block: list[ast.stmt], i: int, name: str, h: str) -> None:
        """After the rewrite at ``block[i]``: drop the upcast of ``h`` nothing reads any more, and
        fuse ``W * N.to(h.dtype)`` into the helper (``_kloom_ar_add_rmsnorm_scaled``) where ``N``
        is the norm, or a plain alias of it, read there and nowhere else. W is then evaluated at
        the helper's call, so it must be free of calls, its statement's only call must be the
        ``.to``, and only dropped upcasts and the aliases may stand between."""
        aliases, alias_at = [name], []
        j = i + 1
        while j < len(block):
            stmt = block[j]
            single = isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            if single and _is_upcast(stmt.value, h) and not loads_of(self.func, stmt.targets[0].id):
                del block[j]  # dead: the norm it fed is the helper's now
                continue
            if single and isinstance(stmt.value, ast.Name) and stmt.value.id == aliases[-1] and len(loads_of(self.func, aliases[-1])) == 1 and len(stores_of(self.func, stmt.targets[0].id)) == 1:
                aliases.append(stmt.targets[0].id)
                alias_at.append(j)
                j += 1
                continue
            break
        if j == len(block) or len(loads_of(self.func, aliases[-1])) != 1:
            return
        stmt = block[j]
        found = [node for node in ast.walk(stmt) if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and self._scaled_by(node, aliases[-1], h) is not None]
        calls = [node for node in ast.walk(stmt) if isinstance(node, ast.Call)]
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Return, ast.Expr)) or len(found) != 1 or len(calls) != 1 or inside(found[0], stmt, parents_of(stmt), CONDITIONAL):
            return
        node = found[0]
        weight = self._scaled_by(node, aliases[-1], h)
        helper = block[i].value
        helper.func.id = "_kloom_ar_add_rmsnorm_scaled"
        helper.args.append(weight)
        parent = parents_of(stmt)[id(node)]
        for field, value in ast.iter_fields(parent):
            if value is node:
                setattr(parent, field, ast.copy_location(ast.Name(name, ast.Load()), node))
            elif isinstance(value, list):
                value[:] = [ast.copy_location(ast.Name(name, ast.Load()), node) if item is node else item for item in value]
        for k in reversed(alias_at):
            del block[k]

    @staticmethod
    def _scaled_by(node: ast.BinOp, norm: str, h: str) -> ast.expr | None:
        """W of ``W * norm.to(h.dtype)`` or ``norm.to(h.dtype) * W`` (W free of calls and of h)."""
        for cast, weight in ((node.right, node.left), (node.left, node.right)):
            is_cast = (
                isinstance(cast, ast.Call) and isinstance(cast.func, ast.Attribute) and cast.func.attr == "to"
                and isinstance(cast.func.value, ast.Name) and cast.func.value.id == norm and len(cast.args) == 1 and not cast.keywords
                and isinstance(cast.args[0], ast.Attribute) and cast.args[0].attr == "dtype"
                and isinstance(cast.args[0].value, ast.Name) and cast.args[0].value.id == h
            )  # fmt: skip
            plain = not any(isinstance(n, (ast.Call, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)) for n in ast.walk(weight))
            if is_cast and plain and h not in names_in(weight) and norm not in names_in(weight):
                return weight
        return None


def all_reduce_rmsnorm(source: str) -> tuple[str, int]:
    """The source with each all-reduce + residual add + RMSNorm found routed through the fused
    helper; returns it and the number rewritten (0: unchanged)."""
    return apply_rewriter(source, _Rewriter)
