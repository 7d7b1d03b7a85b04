"""What the fused collective matmul finds on the reference's syntax tree: the all-gathers, matmuls
and reduce-scatters that may fuse, and whether what lies between them is safe to move across
(``__init__.py`` rewrites what this finds; the overlap strategy's patterns reuse it)."""

from __future__ import annotations

import ast

from ..rewrites import DistCalls, is_module_call, module_aliases, names_in

#: Calls that return a fresh tensor: a buffer made by one of them is seen only through its name.
ALLOCATORS = {"empty", "new_empty", "empty_like", "zeros", "new_zeros", "zeros_like", "ones", "new_ones", "ones_like", "full", "new_full", "full_like", "empty_strided"}
#: Attributes of the product that code between the matmul and the reduce-scatter may read.
METADATA = {"shape", "dtype", "device", "ndim", "size", "dim"}
#: Nodes under which a sub-expression is evaluated conditionally, repeatedly or later.
CONDITIONAL = (ast.IfExp, ast.BoolOp, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def call_name(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


class Finder(DistCalls):
    def __init__(self, tree: ast.Module):
        super().__init__(tree)
        self.torch = module_aliases(tree, "torch")
        self.functional = module_aliases(tree, "torch.nn.functional")

    def is_sum(self, op: ast.expr) -> bool:
        if not (isinstance(op, ast.Attribute) and op.attr == "SUM"):
            return False
        owner = op.value
        if isinstance(owner, ast.Name) and self.functions.get(owner.id) == "ReduceOp":
            return True
        return isinstance(owner, ast.Attribute) and owner.attr == "ReduceOp" and ast.unparse(owner.value) in self.modules

    # The collectives ----------------------------------------------------------------------------
    def gather(self, stmt: ast.stmt) -> tuple[str, ast.expr] | None:
        """``all_gather_into_tensor(name, shard)`` with nothing else: (name, shard)."""
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and self.is_dist(stmt.value, "all_gather_into_tensor")):
            return None
        call = stmt.value
        if call.keywords or len(call.args) != 2 or not isinstance(call.args[0], ast.Name) or isinstance(call.args[1], ast.Starred):
            return None
        return call.args[0].id, call.args[1]

    def reduce_scatter(self, stmt: ast.stmt, product: str) -> ast.Call | None:
        """``reduce_scatter_tensor(out, product[, op=SUM])``, else None."""
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and self.is_dist(stmt.value, "reduce_scatter_tensor")):
            return None
        call = stmt.value
        if not (2 <= len(call.args) <= 3) or any(isinstance(a, ast.Starred) for a in call.args):
            return None
        if not (isinstance(call.args[1], ast.Name) and call.args[1].id == product) or product in names_in(call.args[0]):
            return None
        kw = {k.arg: k.value for k in call.keywords}
        if set(kw) - {"op"} or (len(call.args) == 3 and kw):
            return None
        op = call.args[2] if len(call.args) == 3 else kw.get("op")
        return call if op is None or self.is_sum(op) else None

    # The matmuls ----------------------------------------------------------------------------------
    def linear_args(self, call: ast.Call) -> tuple[ast.expr, ast.expr, ast.expr | None] | None:
        if not is_module_call(call, "linear", *self.functional):
            return None
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords) or len(call.args) > 3:
            return None
        slots = dict(zip(("input", "weight", "bias"), call.args))
        for k in call.keywords:
            if k.arg not in ("input", "weight", "bias") or k.arg in slots:
                return None
            slots[k.arg] = k.value
        if "input" not in slots or "weight" not in slots:
            return None
        bias = slots.get("bias")
        if isinstance(bias, ast.Constant) and bias.value is None:
            bias = None
        return slots["input"], slots["weight"], bias

    def matmul_args(self, node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
        """(left, right) of ``left @ right`` or ``torch.matmul(left, right)``."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return node.left, node.right
        if isinstance(node, ast.Call) and is_module_call(node, "matmul", *self.torch):
            if len(node.args) == 2 and not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args):
                return node.args[0], node.args[1]
        return None

    def gathered_matmul(self, node: ast.AST, buf: str) -> tuple[str, ast.expr, ast.expr | None] | None:
        """``node`` as a matmul with the buffer ``buf`` as an operand: (kind, other operand, bias)."""
        is_buf = lambda e: isinstance(e, ast.Name) and e.id == buf  # noqa: E731

        def transposed(e: ast.expr) -> str | None:
            if isinstance(e, ast.Attribute) and e.attr == "T" and is_buf(e.value):
                return "mm_T"
            if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "t" and is_buf(e.func.value) and not e.args and not e.keywords:
                return "mm_t"
            return None

        pair = self.matmul_args(node)
        if pair is not None:
            left, right = pair
            if is_buf(left) and buf not in names_in(right):
                return "mm", right, None
            kind = transposed(right)
            if kind and buf not in names_in(left):
                return kind, left, None
            return None
        if isinstance(node, ast.Call):
            args = self.linear_args(node)
            if args is not None:
                x, w, bias = args
                rest = names_in(w) | (names_in(bias) if bias is not None else set())
                if is_buf(x) and buf not in rest:
                    return "linear", w, bias
                rest = names_in(x) | (names_in(bias) if bias is not None else set())
                if is_buf(w) and buf not in rest:
                    return "linear_t", x, bias
        return None

    def product(self, stmt: ast.stmt) -> tuple[str, str, ast.expr, ast.expr] | None:
        """``y = a @ b`` (or ``torch.matmul``, or ``F.linear`` without bias): (y, kind, a, b)."""
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return None
        pair = self.matmul_args(stmt.value)
        if pair is not None:
            return stmt.targets[0].id, "mm", pair[0], pair[1]
        if isinstance(stmt.value, ast.Call):
            args = self.linear_args(stmt.value)
            if args is not None and args[2] is None:
                return stmt.targets[0].id, "linear", args[0], args[1]
        return None

    def neutral(self, stmt: ast.stmt, avoid: set[str]) -> bool:
        """Whether a statement between the two calls is safe to move a call across: an assignment
        to plain names that mentions no name in ``avoid``, calls no in-place method, passes no
        ``out=`` and calls no collective."""
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets = [stmt.target]
        else:
            return False
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
                    return False
        if names_in(stmt) & avoid or self.has_collective(stmt):
            return False
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                name = call_name(node)
                if (name and name.endswith("_") and not name.startswith("_")) or any(k.arg == "out" for k in node.keywords):
                    return False
            if isinstance(node, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
                return False
        return True


def parents_of(root: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(root) for child in ast.iter_child_nodes(node)}


def loads_of(scope: ast.AST, name: str) -> list[ast.Name]:
    """Every read of ``name`` in ``scope``."""
    return [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]


def stores_of(scope: ast.AST, name: str) -> list[ast.Name]:
    """Every assignment to ``name`` in ``scope`` (plain names: targets of =, augmented and for)."""
    return [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]


def inside(node: ast.AST, stop: ast.AST, parents: dict[int, ast.AST], kinds) -> bool:
    """Whether an ancestor of ``node`` below ``stop`` is one of ``kinds``."""
    current = parents.get(id(node))
    while current is not None and current is not stop:
        if isinstance(current, kinds):
            return True
        current = parents.get(id(current))
    return False


def is_allocation(stmt: ast.stmt, name: str) -> bool:
    return (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and stmt.targets[0].id == name
        and isinstance(stmt.value, ast.Call)
        and call_name(stmt.value) in ALLOCATORS
    )


def metadata_use(name: ast.Name, parents: dict[int, ast.AST]) -> bool:
    """``y.shape``, ``y.dtype``, ``y.device``, ``y.ndim``, ``y.size(...)``, ``y.dim()``."""
    parent = parents.get(id(name))
    if not (isinstance(parent, ast.Attribute) and parent.value is name and parent.attr in METADATA):
        return False
    if parent.attr in ("size", "dim"):
        call = parents.get(id(parent))
        return isinstance(call, ast.Call) and call.func is parent
    return True
