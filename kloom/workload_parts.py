"""The part of a workload's source that a candidate copies: the computation, not the harness.

A workload file holds two things: the computation (``Model`` and everything it uses) and the
harness that feeds it (``get_inputs``, ``get_init_inputs``, ``roofline``, metadata literals, and
what only they use: an imported suite's input builder, for instance). Strategies that reuse the
reference's source (the reference copy, compile and graph wrappers, source rewrites) copy the
computation only: the harness is the evaluator's business and may do what candidates may not
(load files, seed generators).

``candidate_base(source)`` keeps every top-level statement ``Model`` needs, transitively, and every
statement that defines no name (it may have an effect the computation relies on); it drops the
rest, keeping the kept lines as written. It then renames local variables and parameters that
shadow a builtin candidates may not call (``input``, ``compile``, ...): a function whose argument
is called ``input`` never calls the builtin ``input``, so renaming it changes nothing but lets
the candidate rules read the file without guessing about scopes.
"""

from __future__ import annotations

import ast
import builtins

#: Functions of the harness: never needed by the computation, never copied into candidates.
HARNESS_FUNCTIONS = frozenset({"get_inputs", "get_init_inputs", "roofline"})
#: Builtins whose names the candidate rules refuse wherever they appear.
SHADOW_RENAMED = ("input", "compile", "open", "vars", "eval", "exec", "globals", "locals", "breakpoint", "memoryview", "setattr", "delattr")


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
    return {n.id for t in targets for n in _bound(t)}


def _bound(target: ast.AST) -> list[ast.Name]:
    """The names an assignment target binds (``a``, ``a, b``), not those it only reads
    (``torch.x = ...`` and ``d[k] = ...`` bind nothing)."""
    if isinstance(target, ast.Name):
        return [target]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _bound(elt)]
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    return []


def _used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _is_definition(node: ast.stmt) -> bool:
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and not _defined(node):
        return False  # ``torch.backends.x = ...``: an effect, not a definition
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Import, ast.ImportFrom))


def computation_statements(tree: ast.Module, root: str = "Model") -> list[ast.stmt]:
    """The top-level statements the computation needs, in file order."""
    body = tree.body
    keep = [False] * len(body)
    needed: set[str] = {root}
    for i, node in enumerate(body):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            keep[i] = True
        elif not _is_definition(node):
            # A docstring, a call, a loop or branch at module level: kept (it may set up what the
            # computation relies on); assignments are kept below only where needed.
            keep[i] = True
    changed = True
    while changed:
        changed = False
        for i, node in enumerate(body):
            if keep[i]:
                continue
            defined = _defined(node)
            if defined & HARNESS_FUNCTIONS and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if defined & needed:
                keep[i] = changed = True
        for i, node in enumerate(body):
            if keep[i]:
                fresh = _used(node) - needed
                if fresh:
                    needed |= fresh
                    changed = True
    return [node for node, kept in zip(body, keep) if kept]


def candidate_base(source: str) -> str:
    """The workload's computation as a candidate copies it (see the module's docstring).
    Source that does not parse is returned unchanged (the candidate rules will say why)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source
    lines = source.splitlines()
    kept_lines: set[int] = set()
    covered: set[int] = set()
    kept = {id(n) for n in computation_statements(tree)}
    for node in tree.body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        span = set(range(first, (node.end_lineno or node.lineno) + 1))
        covered |= span
        if id(node) in kept:
            kept_lines |= span
    text = "\n".join(line for n, line in enumerate(lines, 1) if n in kept_lines or n not in covered)
    return rename_shadowed_builtins(_squeeze_blank_lines(text) + "\n")


def _squeeze_blank_lines(text: str) -> str:
    out: list[str] = []
    blank = 0
    for line in text.splitlines():
        blank = blank + 1 if not line.strip() else 0
        if blank <= 2:
            out.append(line)
    return "\n".join(out).strip("\n")


def rename_shadowed_builtins(source: str) -> str:
    """Rename function parameters and locals that shadow a refused builtin (``input`` ...),
    within the function that binds them. A function whose parameter might be passed by keyword
    (``f(input=...)`` on a name the module defines) keeps its names."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    modules = {(a.asname or a.name).split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    keyword_passed = {k.arg for c in ast.walk(tree) if isinstance(c, ast.Call) and not _library_call(c, modules) for k in c.keywords if k.arg}
    edits: dict[tuple[int, int], tuple[int, str]] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        for name in SHADOW_RENAMED:
            if not _binds_locally(fn, name) or _declared_global(fn, name):
                continue
            params = {a.arg for a in _all_args(fn.args)}
            if name in params and name in keyword_passed:
                continue
            new = _fresh(name, taken)
            taken.add(new)
            for node in ast.walk(fn):
                if isinstance(node, ast.Name) and node.id == name:
                    edits[(node.lineno, node.col_offset)] = (len(name), new)
                elif isinstance(node, ast.arg) and node.arg == name:
                    edits[(node.lineno, node.col_offset)] = (len(name), new)
    if not edits:
        return source
    lines = source.splitlines(keepends=True)
    for (line, col), (length, new) in sorted(edits.items(), reverse=True):
        text = lines[line - 1]
        # col_offset counts UTF-8 bytes.
        raw = text.encode("utf-8")
        lines[line - 1] = (raw[:col] + new.encode() + raw[col + length:]).decode("utf-8")
    return "".join(lines)


def _all_args(args: ast.arguments) -> list[ast.arg]:
    extra = [a for a in (args.vararg, args.kwarg) if a is not None]
    return [*args.posonlyargs, *args.args, *args.kwonlyargs, *extra]


def _binds_locally(fn: ast.AST, name: str) -> bool:
    if any(a.arg == name for a in _all_args(fn.args)):
        return True
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
                return True
    return False


def _declared_global(fn: ast.AST, name: str) -> bool:
    return any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in ast.walk(fn))


def _library_call(call: ast.Call, modules: set[str]) -> bool:
    """A call into an imported module (``F.linear(input=...)``): its keywords name a library
    function's parameters, not those of a function of this file."""
    node = call.func
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(call.func, ast.Attribute) and isinstance(node, ast.Name) and node.id in modules


def _fresh(name: str, taken: set[str]) -> str:
    candidate = f"{name}_"
    n = 1
    while candidate in taken or hasattr(builtins, candidate):
        candidate = f"{name}_{n}"
        n += 1
    return candidate
