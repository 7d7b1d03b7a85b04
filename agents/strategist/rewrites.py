"""Source-to-source rewrites of a reference's calls, applied on its syntax tree.

Each rewrite finds a structural pattern (a call of a ``torch.distributed`` collective or of a
``torch.nn.functional`` operator, whatever the module alias) and replaces it with a call of a
helper that the coder appends to the candidate. The helpers fall back to the original call
whenever their fast path does not apply, so a rewrite never changes what is computed.
"""

from __future__ import annotations

import ast


def module_aliases(tree: ast.Module, module: str) -> tuple[set[str], dict[str, str]]:
    """Expressions that name the module ``module`` (a dotted path such as ``torch.nn.functional``),
    and the local names of functions imported from it. ``import torch.nn.functional as F`` gives
    ``F``, ``from torch import nn`` gives ``nn.functional``, a plain ``import torch`` the full path,
    and ``from torch.nn.functional import conv1d as c`` gives ``{"c": "conv1d"}``."""
    modules: set[str] = set()
    functions: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is None:
                    # ``import a.b`` binds ``a``: the module is reached by its full path.
                    if alias.name.split(".")[0] == module.split(".")[0]:
                        modules.add(module)
                elif alias.name == module or module.startswith(alias.name + "."):
                    modules.add(alias.asname + module[len(alias.name):])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                full, local = f"{node.module}.{alias.name}", alias.asname or alias.name
                if full == module or module.startswith(full + "."):
                    modules.add(local + module[len(full):])
                elif node.module == module:
                    functions[local] = alias.name
    return modules, functions


def dist_aliases(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """``module_aliases`` of ``torch.distributed`` (``from torch.distributed import all_reduce as ar``
    gives ``{"ar": "all_reduce"}``)."""
    return module_aliases(tree, "torch.distributed")


def is_module_call(node: ast.Call, name: str, modules: set[str], functions: dict[str, str]) -> bool:
    """Whether ``node`` calls the function ``name`` of the module whose aliases are given, under any alias."""
    func = node.func
    if isinstance(func, ast.Name):
        return functions.get(func.id) == name
    if isinstance(func, ast.Attribute) and func.attr == name:
        return ast.unparse(func.value) in modules
    return False


#: Every ``torch.distributed`` call that communicates or waits on other ranks.
COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
    "all_to_all_single", "broadcast", "reduce", "gather", "scatter", "send", "recv", "isend", "irecv", "barrier",
    "batch_isend_irecv", "all_gather_object", "broadcast_object_list",
})  # fmt: skip


def names_in(node: ast.AST) -> set[str]:
    """Every plain name that ``node`` mentions."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


class DistCalls:
    """A module's aliases of ``torch.distributed`` and the questions the rewrites ask of its calls."""

    def __init__(self, tree: ast.Module):
        self.modules, self.functions = dist_aliases(tree)

    def is_dist(self, call: ast.Call, names: str | tuple[str, ...] | frozenset[str] | None = None) -> bool:
        """Whether ``call`` calls ``torch.distributed``'s ``names`` (one name, several, or any
        function when None), under any alias."""
        if names is None:
            f = call.func
            if isinstance(f, ast.Name):
                return f.id in self.functions
            return isinstance(f, ast.Attribute) and ast.unparse(f.value) in self.modules
        if isinstance(names, str):
            names = (names,)
        return any(is_module_call(call, n, self.modules, self.functions) for n in names)

    def has_collective(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Call) and self.is_dist(n, COLLECTIVES) for n in ast.walk(node))


class _CallRenamer(ast.NodeTransformer):
    def __init__(self, name: str, helper: str, modules: set[str], functions: dict[str, str]):
        self.name, self.helper, self.modules, self.functions = name, helper, modules, functions
        self.count = 0

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if is_module_call(node, self.name, self.modules, self.functions):
            self.count += 1
            return ast.copy_location(ast.Call(func=ast.Name(id=self.helper, ctx=ast.Load()), args=node.args, keywords=node.keywords), node)
        return node


def rename_collective(source: str, name: str, helper: str) -> tuple[str, int]:
    """Replace every call of the collective ``name`` with ``helper(...)``; returns the new source and the count."""
    tree = ast.parse(source)
    modules, functions = dist_aliases(tree)
    renamer = _CallRenamer(name, helper, modules, functions)
    tree = renamer.visit(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree), renamer.count


def rename_calls(source: str, calls: list[tuple[ast.Call, str]]) -> str:
    """``source`` with the called name of each ``(call, helper)`` replaced by ``helper``; the
    arguments, and the rest of the file, keep their text."""
    data = source.encode()
    # ast positions are (line, UTF-8 byte column): turn them into offsets in the encoded source.
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    spans = sorted(
        ((starts[c.func.lineno - 1] + c.func.col_offset, starts[c.func.end_lineno - 1] + c.func.end_col_offset, helper) for c, helper in calls),
        reverse=True,
    )
    for begin, end, helper in spans:
        data = data[:begin] + helper.encode() + data[end:]
    return data.decode()


def count_calls(source: str, name: str) -> int:
    tree = ast.parse(source)
    modules, functions = dist_aliases(tree)
    return sum(1 for n in ast.walk(tree) if isinstance(n, ast.Call) and is_module_call(n, name, modules, functions))


_BLOCK_FIELDS = ("body", "orelse", "finalbody")


def statement_blocks(tree: ast.AST):
    """Every statement list under ``tree`` (bodies, else and finally blocks), as (owner, field, list)."""
    for node in ast.walk(tree):
        for name in _BLOCK_FIELDS:
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield node, name, block


def apply_rewriter(source: str, rewriter_class) -> tuple[str, int]:
    """``source`` after ``rewriter_class(tree).run()`` and how many places it changed; the
    source itself, untouched, when it changed none."""
    tree = ast.parse(source)
    rewriter = rewriter_class(tree)
    rewriter.run()
    if not rewriter.count:
        return source, 0
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n", rewriter.count
