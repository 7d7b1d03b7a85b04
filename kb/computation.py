"""Whether two workload files state the same computation, whatever their shapes.

A kernel is written for one ``Model``: it can be reused verbatim on the same workload file at
another world size, or on a copy whose shape profiles, supported world sizes, tolerances or
descriptions differ, but not on a different computation, however alike its structure. The key
below is a digest of a workload's syntax tree without those literals and without docstrings, so
that such variants share it.
"""

from __future__ import annotations

import ast
import hashlib
from functools import lru_cache

#: Module-level names whose values say how big, where or how strict, not what is computed.
_NOT_COMPUTATION = frozenset({"SHAPES", "WORLD_SIZES", "TOLERANCE", "NAME", "DESCRIPTION", "SOURCE", "FAMILY"})


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _sets_metadata(node: ast.stmt) -> bool:
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    else:
        return False
    return all(isinstance(t, ast.Name) and t.id in _NOT_COMPUTATION for t in targets)


class _StripDocstrings(ast.NodeTransformer):
    def _strip(self, node):
        self.generic_visit(node)
        node.body = [n for n in node.body if not _is_docstring(n)] or [ast.Pass()]
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _strip


@lru_cache(maxsize=1024)
def computation_key(source: str) -> str | None:
    """A digest shared by workload files that compute the same thing; None if it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    body = [n for n in tree.body if not _is_docstring(n) and not _sets_metadata(n)]
    module = _StripDocstrings().visit(ast.Module(body=body, type_ignores=[]))
    return hashlib.sha256(ast.dump(module, annotate_fields=False, include_attributes=False).encode()).hexdigest()
