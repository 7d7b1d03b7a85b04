"""Collective + matmul pairs as torch symmetric memory's fused ops: a source rewrite.

Two tensor-parallel shapes are found by structure on the reference's syntax tree:

1. ``dist.all_gather_into_tensor(buf, shard)`` (default group, no other argument), later in the
   same block a matmul with the gathered buffer as an operand (``buf @ B``, ``torch.matmul(buf, B)``,
   ``F.linear(buf, w[, b])``, or transposed as the second operand: ``x @ buf.t()``, ``x @ buf.T``,
   ``F.linear(x, buf[, b])``). Both become one ``_kloom_ag_matmul(buf, shard, kind, other, bias)``
   at the matmul's place, which runs ``torch.ops.symm_mem.fused_all_gather_matmul``: the copy of
   shard i+1 overlaps the matmul of shard i. When ``buf`` is read again later, the matmul must be
   a plain ``y = ...`` and the call becomes ``buf, y = _kloom_ag_matmul(..., keep=True)``.
2. ``y = a @ b`` (``torch.matmul(a, b)``, ``F.linear(a, w)`` without bias), later in the same
   block ``dist.reduce_scatter_tensor(out, y)`` with the default (sum) reduction and group, and
   ``y`` read nowhere else but for its shape, dtype or device in between. The assignment becomes
   ``y = _KloomProduct(kind, a, b)`` (which answers shape questions without computing), the
   collective ``_kloom_matmul_rs(out, y)``, which runs ``fused_matmul_reduce_scatter``.

What is safe to move (the gather later, the matmul later): the buffer is a fresh local allocation
seen by nothing between; the statements in between are assignments to plain names that mention
neither the buffer nor the moved operands' names, call no in-place method (``x.add_``), pass no
``out=`` and call no collective; no compound statement sits between; the matmul is evaluated
unconditionally in its statement. Anything else keeps the original calls.

At run time the helpers take the fused op only on CUDA, world size > 1, the default group, one
of bf16/fp16/fp32 for every tensor, 2-D right-hand operands, contiguous shards and the exact
shapes the original calls imply; otherwise (and under ``torch.compile`` or CUDA-graph capture)
they run exactly the original two calls. A failure of the fused op on its first use switches the
process to the original calls for good, with a warning; after one success, failures propagate.
"""

from __future__ import annotations

import ast

from ..embed import runtime_source
from ..rewrites import apply_rewriter, names_in, statement_blocks
from .detect import CONDITIONAL, Finder, inside, is_allocation, loads_of, metadata_use, parents_of

#: The runtime a candidate carries, copied from ``runtime.py``.
FUSED_MATMUL_HELPER = runtime_source(f"{__name__}.runtime")


class _Rewriter:
    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.finder = Finder(tree)
        self.count = 0

    def run(self) -> None:
        for func in [n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            parents = parents_of(func)
            for owner, _, block in list(statement_blocks(func)):
                if inside(block[0], func, parents, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                    continue  # a nested function's blocks are visited as its own
                looped = owner is not func and (isinstance(owner, (ast.For, ast.AsyncFor, ast.While)) or inside(owner, func, parents, (ast.For, ast.AsyncFor, ast.While)))
                self.gathers(func, block, parents, looped)
                self.reduce_scatters(func, block, parents)

    # 1. all-gather, then a matmul of the gathered buffer ----------------------------------------------
    def gathers(self, func: ast.AST, block: list[ast.stmt], parents: dict[int, ast.AST], looped: bool) -> None:
        i = 0
        while i < len(block):
            found = self.finder.gather(block[i])
            if found is not None and self.gather_then_matmul(func, block, i, found, parents, looped):
                continue  # block[i] is now the statement after the removed gather
            i += 1

    def gather_then_matmul(self, func, block, i, found, parents, looped) -> bool:
        buf, shard = found
        # The buffer: a fresh allocation in this block, unseen between it and the gather.
        alloc = next((k for k in range(i - 1, -1, -1) if buf in {t.id for s in [block[k]] for t in ast.walk(s) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}), None)
        if alloc is None or not is_allocation(block[alloc], buf) or any(buf in names_in(s) for s in block[alloc + 1 : i]):
            return False
        avoid = names_in(shard) | {buf}
        for j in range(i + 1, len(block)):
            stmt = block[j]
            if buf not in names_in(stmt):
                if not self.finder.neutral(stmt, avoid):
                    return False
                continue
            return self.rewrite_matmul(func, block, i, j, buf, shard, parents, looped)
        return False

    def rewrite_matmul(self, func, block, i, j, buf, shard, parents, looped) -> bool:
        stmt = block[j]
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Return)) or getattr(stmt, "value", None) is None:
            return False
        uses = [n for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id == buf]
        if len(uses) != 1 or self.finder.has_collective(stmt):
            return False
        node = uses[0]
        match = None
        while node is not stmt:
            node = parents[id(node)]
            match = self.finder.gathered_matmul(node, buf)
            if match is not None:
                break
        if match is None or inside(node, stmt, parents, CONDITIONAL):
            return False
        kind, other, bias = match
        # Read again later (or in another iteration, or from a nested function): keep the gathered tensor.
        others = [n for n in loads_of(func, buf) if n is not uses[0] and n is not block[i].value.args[0]]
        if any(inside(n, func, parents, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) for n in others):
            return False
        later = [n for n in others if looped or n.lineno > stmt.end_lineno or (n.lineno == stmt.end_lineno and n.col_offset > stmt.end_col_offset)]
        keep = bool(later)
        if keep and not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) and stmt.value is node):
            return False
        args = [ast.Name(buf, ast.Load()), block[i].value.args[1], ast.Constant(kind), other]
        if bias is not None:
            args.append(bias)
        call = ast.Call(ast.Name("_kloom_ag_matmul", ast.Load()), args, [ast.keyword("keep", ast.Constant(True))] if keep else [])
        if keep:
            target = ast.Tuple([ast.Name(buf, ast.Store()), ast.Name(stmt.targets[0].id, ast.Store())], ast.Store())
            block[j] = ast.copy_location(ast.Assign([target], call), stmt)
        else:
            _replace(parents[id(node)], node, call)
        del block[i]
        self.count += 1
        return True

    # 2. a matmul, then the reduce-scatter of its product --------------------------------------------------
    def reduce_scatters(self, func, block, parents) -> None:
        for i, stmt in enumerate(block):
            found = self.finder.product(stmt)
            if found is None:
                continue
            y, kind, a, b = found
            avoid = names_in(a) | names_in(b)
            if y in avoid:
                continue
            metadata: list[ast.Name] = []
            for j in range(i + 1, len(block)):
                call = self.finder.reduce_scatter(block[j], y)
                if call is not None:
                    allowed = {id(call.args[1])} | {id(n) for n in metadata}
                    if any(id(n) not in allowed for n in loads_of(func, y)):
                        break  # the product is used otherwise
                    block[i] = ast.copy_location(ast.Assign(stmt.targets, ast.Call(ast.Name("_KloomProduct", ast.Load()), [ast.Constant(kind), a, b], [])), stmt)
                    block[j].value = ast.copy_location(ast.Call(ast.Name("_kloom_matmul_rs", ast.Load()), call.args[:2], _op_keyword(call)), call)
                    self.count += 1
                    break
                between = block[j]
                uses = [n for n in ast.walk(between) if isinstance(n, ast.Name) and n.id == y]
                if not self.finder.neutral(between, avoid) or not all(metadata_use(n, parents) for n in uses):
                    break
                if any(isinstance(t, ast.Name) and t.id == y for t in ast.walk(between) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)):
                    break
                metadata += uses


def _op_keyword(call: ast.Call) -> list[ast.keyword]:
    if len(call.args) == 3:
        return [ast.keyword("op", call.args[2])]
    return [k for k in call.keywords if k.arg == "op"]


def _replace(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for field, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, field, ast.copy_location(new, old))
            return
        if isinstance(value, list):
            for k, item in enumerate(value):
                if item is old:
                    value[k] = ast.copy_location(new, old)
                    return
    raise ValueError("node not found in its parent")


def fused_ag_matmul(source: str) -> tuple[str, int]:
    """The source with each all-gather + matmul and each matmul + reduce-scatter that may fuse
    routed through the helpers; returns it and the number of pairs rewritten (0: unchanged)."""
    return apply_rewriter(source, _Rewriter)
