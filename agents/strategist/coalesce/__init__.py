"""Coalescing independent all-reduces: a source rewrite on the reference's syntax tree.

Two ``all_reduce`` calls with the same reduction and group, where nothing between them reads or
writes the first call's tensor (or anything computed from it in the same block), can run as one
collective: both tensors are packed into one flat buffer, reduced once and unpacked. That saves
one collective's latency and launch per merged call, which is most of a small all-reduce's time
(scalars per row in vocab-parallel losses, norms, statistics).

The analysis is conservative and per block of straight-line statements: a group ends at any
statement that touches one of its tensors (by name or through a name derived from it in the
block), at any other collective, and at any compound statement (a loop, a branch, ``with``,
``return``). The runtime helper falls back to the original calls when the tensors differ in
dtype or device, or share storage, so a rewrite never changes what is computed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..embed import runtime_source
from ..rewrites import DistCalls, names_in, statement_blocks

HELPER_NAME = "_kloom_all_reduce_coalesced"

#: The runtime a candidate carries, copied from ``runtime.py``.
COALESCE_HELPER = runtime_source(f"{__name__}.runtime")


@dataclass
class _Call:
    index: int  # statement index in its block
    tensor: str
    key: tuple[str, str]  # (op source, group source)


@dataclass
class _Group:
    key: tuple[str, str]
    calls: list[_Call] = field(default_factory=list)


class _Finder(DistCalls):
    def all_reduce(self, stmt: ast.stmt, index: int) -> _Call | None:
        """The statement as a coalescable ``all_reduce(name, [op], ...)`` call, else None."""
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and self.is_dist(stmt.value, "all_reduce")):
            return None
        call = stmt.value
        if not call.args or not isinstance(call.args[0], ast.Name) or len(call.args) > 3:
            return None
        kw = {k.arg: k.value for k in call.keywords}
        if None in kw or set(kw) - {"op", "group", "async_op"}:
            return None
        if "async_op" in kw and not (isinstance(kw["async_op"], ast.Constant) and kw["async_op"].value is False):
            return None
        op = call.args[1] if len(call.args) > 1 else kw.get("op")
        group = call.args[2] if len(call.args) > 2 else kw.get("group")
        return _Call(index, call.args[0].id, (ast.unparse(op) if op is not None else "", ast.unparse(group) if group is not None else ""))


def _derived(block: list[ast.stmt]) -> dict[str, set[str]]:
    """For each name assigned in the block, the names its value was computed from (transitively)."""
    deps: dict[str, set[str]] = {}
    for stmt in block:
        if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            reads = names_in(stmt.value)
            closure = set(reads)
            for r in reads:
                closure |= deps.get(r, set())
            for t in targets:
                for name in names_in(t):
                    deps[name] = deps.get(name, set()) | closure
    return deps


def _groups(block: list[ast.stmt], finder: _Finder) -> list[_Group]:
    deps = _derived(block)
    groups: list[_Group] = []
    current: _Group | None = None

    def close() -> None:
        nonlocal current
        if current is not None and len(current.calls) > 1:
            groups.append(current)
        current = None

    def touches(stmt: ast.stmt, group: _Group) -> bool:
        members = {c.tensor for c in group.calls}
        for name in names_in(stmt):
            if name in members or deps.get(name, set()) & members:
                return True
        return False

    for i, stmt in enumerate(block):
        call = finder.all_reduce(stmt, i)
        if call is not None:
            if current is not None and current.key == call.key and call.tensor not in {c.tensor for c in current.calls}:
                current.calls.append(call)
            else:
                close()
                current = _Group(call.key, [call])
            continue
        if current is None:
            continue
        compound = not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Pass))
        if compound or finder.has_collective(stmt) or touches(stmt, current):
            close()
    close()
    return groups


def coalesce_allreduces(source: str) -> tuple[str, int]:
    """The source with each group of independent all-reduces merged into one call at the group's
    last member; returns it and the number of calls removed. Only the merged calls' lines change:
    the rest of the file (comments, formatting) stays as written."""
    tree = ast.parse(source)
    finder = _Finder(tree)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (first line, last line, replacement), 1-based
    for _, _, block in statement_blocks(tree):
        for group in _groups(block, finder):
            stmts = [block[c.index] for c in group.calls]
            if any(_shares_line(s, block) for s in stmts):
                continue  # statements joined by ';' are left alone
            last = stmts[-1].value
            kwargs = [k for k in last.keywords if k.arg in ("op", "group")]
            kwargs += [ast.keyword(name, arg) for name, arg in zip(("op", "group"), last.args[1:])]
            merged = ast.Call(ast.Name(HELPER_NAME, ast.Load()), [ast.List([ast.Name(c.tensor, ast.Load()) for c in group.calls], ast.Load())], kwargs)
            indent = " " * stmts[-1].col_offset
            for stmt in stmts[:-1]:
                edits.append((stmt.lineno, stmt.end_lineno, ""))
            edits.append((stmts[-1].lineno, stmts[-1].end_lineno, f"{indent}{ast.unparse(merged)}\n"))
    removed = 0
    for first, last, text in sorted(edits, reverse=True):
        lines[first - 1 : last] = [text] if text else []
        removed += not text
    return "".join(lines), removed


def _shares_line(stmt: ast.stmt, block: list[ast.stmt]) -> bool:
    return any(o is not stmt and (o.lineno <= stmt.end_lineno and o.end_lineno >= stmt.lineno) for o in block)
