"""How a candidate carries code that lives in real, tested modules: one self-contained file may
import nothing but torch, triton and a few standard modules (``static_check.ALLOWED_MODULES``), so
kloom copies the modules' source into it. Three ways, one per kind of module:

- ``runtime_source``: a strategy's runtime (``agents/strategist/<strategy>/runtime.py``), copied
  verbatim but for its docstring, with named top-level constants set to the plan's values. Its
  names are private by convention (``_kl_``/``_kloom_``), so it needs no renaming.
- ``embed_kernels``: kernel modules of the Triton library (``kernels/<family>/``), each with its
  ``from kernels.<...> import ...`` lines removed and the modules they name embedded before it
  (once each, dependencies first). The imported module and the embedded text are the same code,
  which ``kernels/`` tests on the CPU and benchmarks on the GPU.
- ``inline_modules``: modules inlined with collision-free names (the comm kernels and the overlap
  runtime, which share names such as ``supported``). Each module's top-level names are renamed
  ``_klc_<module>__<name>``; imports of one inlined module by another (``from .peers import
  Peers``, ``from kernels.comm import ag_gemm as ag`` then ``ag.supported``) become references to
  the renamed names; ``from __future__`` lines are dropped (the block follows the reference's
  code); the modules it imports are bound under private names (``import torch.distributed as
  dist`` becomes ``... as _klb_torch_distributed``, ``from dataclasses import field`` becomes
  ``... as _klb_field``; ``triton`` and ``tl`` stay). Names listed as entry points keep their
  names: they are what the rewritten reference calls.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

#: The repository root (``agents/`` and ``kernels/`` are in it).
ROOT = Path(__file__).resolve().parents[2]
#: The root of the kernel library (``kernels/`` next to ``agents/``).
KERNELS_ROOT = ROOT / "kernels"


class EmbedError(ValueError):
    """A module that cannot be embedded (missing, or breaking the rules of its kind); the message
    says why."""


# ---- a strategy's runtime, verbatim -------------------------------------------------------------
def _file(module: str, package: tuple[str, ...], what: str) -> Path:
    """The file of a dotted module under ``package`` (a module of the repository, never a name
    looked up on the import path)."""
    parts = module.split(".")
    if tuple(parts[: len(package)]) != package or len(parts) <= len(package) or not all(p.isidentifier() for p in parts):
        raise EmbedError(f"{module!r} is not a module of {what}")
    path = ROOT.joinpath(*parts).with_suffix(".py")
    if not path.is_file():
        raise EmbedError(f"{module} has no file at {path}")
    return path


def runtime_file(module: str) -> Path:
    """The file of a dotted ``agents.strategist`` module (``...fused_matmul.runtime`` ->
    ``agents/strategist/fused_matmul/runtime.py``)."""
    return _file(module, ("agents", "strategist"), "the strategist")


def _literal(value: object) -> str:
    """A constant's source text (strings in double quotes, as the runtimes write them; tuples of such)."""
    if isinstance(value, bool) or value is None or isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple):
        items = [_literal(v) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    raise EmbedError(f"a runtime constant must be a finite number, a string, a bool, None or a tuple of them, not {value!r}")


def runtime_source(module: str, **constants: object) -> str:
    """The text a candidate carries for the runtime ``module``: a blank line, then the module's
    code after its docstring, with each top-level ``NAME = ...`` named in ``constants`` set to
    that value. A runtime has no ``from __future__`` import (it would not be first in the
    candidate) and imports no other kloom module (the candidate could not)."""
    source = runtime_file(module).read_text()
    tree = ast.parse(source)
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        start = body[0].end_lineno
        body = body[1:]
    else:
        start = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module == "__future__" or node.level or (node.module or "").split(".")[0] in ("agents", "kernels", "kloom", "services")):
            raise EmbedError(f"{module} line {node.lineno}: a runtime imports torch and the standard library only, never from __future__")
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in ("agents", "kernels", "kloom", "services") for a in node.names):
            raise EmbedError(f"{module} line {node.lineno}: a runtime imports torch and the standard library only")
    lines = source.splitlines(keepends=True)
    assigned = {}
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = node
    for name in constants:
        if name not in assigned:
            raise EmbedError(f"{module} assigns no top-level constant {name}")
    for name, node in sorted(assigned.items(), key=lambda kv: -kv[1].lineno):
        if name in constants:
            lines[node.lineno - 1 : node.end_lineno] = [f"{name} = {_literal(constants[name])}\n"]
    code = "".join(lines[start:]).lstrip("\n")
    return "\n" + code


# ---- the Triton kernel library, as text -------------------------------------------------------
def module_file(module: str) -> Path:
    """The file of a dotted kernel module, ``kernels.softmax.kernel`` -> ``kernels/softmax/kernel.py``."""
    return _file(module, ("kernels",), "the kernel library")


@lru_cache(maxsize=None)
def _parsed(module: str) -> tuple[str, tuple[str, ...], tuple[tuple[int, int], ...]]:
    """(source, kernel modules it imports, line spans of those imports)."""
    source = module_file(module).read_text()
    tree = ast.parse(source)
    deps: list[str] = []
    spans: list[tuple[int, int]] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            raise EmbedError(f"{module} imports from __future__, which must come first in a file: it cannot be embedded")
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "kernels":
            deps.append(node.module)
            spans.append((node.lineno, node.end_lineno))
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "kernels" for a in node.names):
            raise EmbedError(f"{module} line {node.lineno}: import names from kernel modules (``from kernels.x import y``)")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node not in tree.body:
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if any(n.split(".")[0] == "kernels" for n in names):
                raise EmbedError(f"{module} line {node.lineno}: kernel modules are imported at the top level only")
    return source, tuple(deps), tuple(spans)


def dependencies(module: str) -> list[str]:
    """``module`` and every kernel module it imports, dependencies first."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise EmbedError(f"kernel modules import each other in a cycle: {' -> '.join(path + (name,))}")
        if name in order:
            return
        for dep in _parsed(name)[1]:
            visit(dep, path + (name,))
        order.append(name)

    visit(module, ())
    return order


def stripped_source(module: str) -> str:
    """The module's source without its ``from kernels...`` import lines (what is embedded)."""
    source, _, spans = _parsed(module)
    lines = source.splitlines(keepends=True)
    drop = {i for start, end in spans for i in range(start - 1, end)}
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def embed_kernels(modules: list[str] | tuple[str, ...]) -> str:
    """The source text of ``modules`` and their dependencies, each once, ready to append to a
    candidate."""
    order: list[str] = []
    for module in modules:
        for name in dependencies(module):
            if name not in order:
                order.append(name)
    return "".join(f"\n\n# ---- embedded from {name} ----\n" + stripped_source(name).rstrip() + "\n" for name in order)


def bound_names(source: str) -> dict[str, str]:
    """Top-level names a source binds, each with what binds it (``import torch`` -> "import
    torch"; a def, class or assignment -> "def"), to find clashes between embedded texts."""
    names: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = f"import {a.name if a.asname else a.name.split('.')[0]}"
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                names[a.asname or a.name] = f"from {node.module} import {a.name}"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = "def"
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names[n.id] = "def"
    return names


def clashes(reference: str, embedded: str) -> list[str]:
    """Names the reference binds that the embedded text binds to something else."""
    ours = bound_names(embedded)
    theirs = bound_names(reference)
    return sorted(n for n, how in ours.items() if n in theirs and (how == "def" or theirs[n] != how))


# ---- modules inlined under private names ------------------------------------------------------
@dataclass
class _Module:
    name: str  # dotted
    tree: ast.Module
    names: dict[str, str]  # top-level name -> bundled name
    aliases: dict[str, str]  # local alias of a bundled module -> its dotted name


def _path(dotted: str) -> Path:
    spec = importlib.util.find_spec(dotted)
    if spec is None or spec.origin is None:
        raise EmbedError(f"module {dotted} not found")
    return Path(spec.origin)


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.rsplit(".", node.level)[0]
    return f"{package}.{node.module}" if node.module else package


def _top_names(tree: ast.Module) -> list[str]:
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(node.name)
        elif isinstance(node, ast.Assign):
            found += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.append(node.target.id)
    return found


def _check_no_shadowing(mod: _Module) -> None:
    """A function that binds a top-level name locally would be renamed wrongly: refuse it."""
    for node in ast.walk(mod.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            bound = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
            bound |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
            if not isinstance(node, ast.Lambda):
                bound |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            clash = bound & set(mod.names)
            if clash:
                where = getattr(node, "name", "lambda")
                raise EmbedError(f"{mod.name}.{where} binds the module-level name(s) {sorted(clash)} locally")
        if isinstance(node, ast.ClassDef):
            fields = {t.id for stmt in node.body if isinstance(stmt, (ast.Assign, ast.AnnAssign)) for t in ast.walk(stmt) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
            if fields & set(mod.names):
                raise EmbedError(f"{mod.name}.{node.name} has attribute(s) named as module-level names: {sorted(fields & set(mod.names))}")


class _Renamer(ast.NodeTransformer):
    def __init__(self, names: dict[str, str], modules: dict[str, dict[str, str]]):
        self.names = names  # local name -> bundled name
        self.modules = modules  # local alias of a bundled module -> its names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names:
            return ast.copy_location(ast.Name(self.names[node.id], node.ctx), node)
        if node.id in self.modules:
            raise EmbedError(f"the bundled module alias {node.id!r} is used other than as `{node.id}.name`")
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id in self.modules:
            names = self.modules[node.value.id]
            if node.attr not in names:
                raise EmbedError(f"{node.value.id}.{node.attr} is not a top-level name of a bundled module")
            return ast.copy_location(ast.Name(names[node.attr], node.ctx), node)
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.name = self.names.get(node.name, node.name)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self.generic_visit(node)
        node.name = self.names.get(node.name, node.name)
        return node


#: Imports kept under their usual names: Triton's interpreter recognises a kernel's compile-time
#: parameters by the annotation text ``tl.constexpr``, and the names are the same modules wherever
#: a reference binds them.
_KEEP_NAMES = {"triton": "triton", "triton.language": "tl"}


def _private(module: str) -> str:
    """The name a bundle imports ``module`` (or a name from one) under: the reference's own names
    (``field``, ``dist``, even ``torch``) stay the reference's."""
    return "_klb_" + module.replace(".", "_")


def inline_modules(modules: list[str], entry_points: set[str] = frozenset()) -> str:
    """The source of ``modules`` (dotted names, each after the modules it imports), inlined as one
    block of top-level code with collision-free names; ``entry_points`` keep their names."""
    loaded: dict[str, _Module] = {}
    for dotted in modules:
        tree = ast.parse(_path(dotted).read_text())
        tag = dotted.rsplit(".", 1)[-1]
        names = {n: n if n in entry_points else f"_klc_{tag}__{n}" for n in _top_names(tree)}
        loaded[dotted] = _Module(dotted, tree, names, {})
    out: list[str] = []
    imports: list[str] = []
    for dotted in modules:
        mod = loaded[dotted]
        _check_no_shadowing(mod)
        local = dict(mod.names)
        module_aliases: dict[str, dict[str, str]] = {}
        body = []
        for node in mod.tree.body:
            if isinstance(node, ast.ImportFrom):
                source = _absolute(dotted, node)
                if source == "__future__":
                    continue
                if source in loaded:
                    for alias in node.names:
                        if alias.name not in loaded[source].names:
                            raise EmbedError(f"{dotted} imports {alias.name} from {source}, which does not define it at top level")
                        local[alias.asname or alias.name] = loaded[source].names[alias.name]
                    continue
                bundled_children = {f"{source}.{a.name}": a for a in node.names if f"{source}.{a.name}" in loaded}
                if bundled_children:
                    if len(bundled_children) != len(node.names):
                        raise EmbedError(f"{dotted}: import bundled and other modules on separate lines")
                    for full, alias in bundled_children.items():
                        module_aliases[alias.asname or alias.name] = loaded[full].names
                    continue
                if source.split(".")[0] in ("kernels", "agents"):
                    raise EmbedError(f"{dotted} imports {source}, which is not bundled before it")
                for alias in node.names:
                    private = _private(alias.name)
                    local[alias.asname or alias.name] = private
                    imports.append(f"from {source} import {alias.name} as {private}")
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in loaded or alias.name.split(".")[0] in ("kernels", "agents"):
                        raise EmbedError(f"{dotted}: write `from package import module` for the bundled {alias.name}")
                    if alias.asname is None and "." in alias.name:
                        raise EmbedError(f"{dotted}: import {alias.name} under a name (`import {alias.name} as ...`)")
                    if alias.name in _KEEP_NAMES and (alias.asname or alias.name) == _KEEP_NAMES[alias.name]:
                        imports.append(ast.unparse(ast.Import([alias])))
                        continue
                    private = _private(alias.name)
                    local[alias.asname or alias.name] = private
                    imports.append(f"import {alias.name} as {private}")
                continue
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                continue  # the module's docstring
            body.append(node)
        renamer = _Renamer(local, module_aliases)
        mod.tree.body = [renamer.visit(node) for node in body]
        ast.fix_missing_locations(mod.tree)
        out.append(f"# ---- {dotted} (inlined) ----\n" + ast.unparse(mod.tree))
    unique_imports = list(dict.fromkeys(imports))
    return "\n".join(unique_imports) + "\n\n\n" + "\n\n\n".join(out) + "\n"
