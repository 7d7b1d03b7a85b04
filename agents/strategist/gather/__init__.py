"""``all_gather`` into a list, then ``torch.cat`` of that list: a source rewrite into one
``all_gather_into_tensor`` whose output already is the concatenation.

The list form costs a copy per rank out of the collective's flat buffer and another full copy
for the ``cat``; the tensor form writes every rank's block straight into one buffer. The rewrite
renames the two calls to helpers: the gather fills the list with views of one flat buffer, and the
``cat`` along dim 0 of exactly those views returns the buffer itself (other dims, or a list
that no longer holds those views, take the ordinary ``torch.cat``). Anything the fast path does
not cover (uneven shapes, non-default arguments, ``async_op``) calls the original collective.
"""

from __future__ import annotations

import ast

from ..embed import runtime_source
from ..rewrites import DistCalls, module_aliases

#: The runtime a candidate carries, copied from ``runtime.py``.
GATHER_HELPER = runtime_source(f"{__name__}.runtime")


class _Rewriter(ast.NodeTransformer):
    def __init__(self, tree: ast.Module):
        self.dist = DistCalls(tree)
        self.torch = module_aliases(tree, "torch")[0]
        self.lists: set[str] = set()
        self.gathers = 0

    def _is_cat(self, node: ast.Call) -> bool:
        f = node.func
        return isinstance(f, ast.Attribute) and f.attr in ("cat", "concat", "concatenate") and ast.unparse(f.value) in self.torch

    def gather_lists(self, tree: ast.Module) -> None:
        """Names of lists that an ``all_gather`` fills (first positional argument, a plain name)
        and that a ``torch.cat`` concatenates."""
        gathered, catted = set(), set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Name):
                continue
            if self.dist.is_dist(node, "all_gather") and len(node.args) == 2:
                gathered.add(node.args[0].id)
            elif self._is_cat(node):
                catted.add(node.args[0].id)
        self.lists = gathered & catted

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if self.dist.is_dist(node, "all_gather"):
            if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in self.lists:
                self.gathers += 1
                return ast.copy_location(ast.Call(ast.Name("_kloom_all_gather_list", ast.Load()), node.args, node.keywords), node)
        if self._is_cat(node) and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in self.lists:
            return ast.copy_location(ast.Call(ast.Name("_kloom_cat_gathered", ast.Load()), node.args, node.keywords), node)
        return node


def gather_into_tensor(source: str) -> tuple[str, int]:
    """The source with list all-gathers (whose list is concatenated) and those concatenations
    routed through the helpers; returns it and the number of gathers rewritten (0: the source
    unchanged)."""
    tree = ast.parse(source)
    rewriter = _Rewriter(tree)
    rewriter.gather_lists(tree)
    if not rewriter.lists:
        return source, 0
    tree = rewriter.visit(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n", rewriter.gathers
