"""Static checks that reject candidates which cannot be honest, before any of their code runs.

The checks read the syntax tree (and the C++/CUDA sources held in string literals). They are the
first line of defence; the rank processes check again at run time (``integrity.py``) and the
evaluator compares outputs in a process that never imports candidate code.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

#: Top-level modules a candidate may import. Anything else (threading, subprocess, ctypes, gc,
#: inspect, sys, importlib, socket, time, pickle, ...) is rejected.
ALLOWED_MODULES = frozenset(
    {
        "torch",
        "triton",
        "math",
        "cmath",
        "functools",
        "itertools",
        "operator",
        "typing",
        "typing_extensions",
        "dataclasses",
        "collections",
        "enum",
        "abc",
        "numbers",
        "warnings",
        "os",
        "numpy",
        "einops",
        "__future__",
    }
)
#: Sub-modules of allowed packages that still give a way around the evaluator.
DENIED_SUBMODULES = (
    "torch.multiprocessing",
    "torch.testing",
    "torch.distributed.elastic",
    "torch.distributed.rpc",
    "torch.utils.data",
    "numpy.ctypeslib",
    "os.path",
)
#: The only attributes of ``os`` a candidate may use (reading the environment, counting CPUs).
ALLOWED_OS_ATTRS = frozenset({"environ", "getenv", "cpu_count"})
#: Builtins whose use defeats static reading or reaches outside the process.
DENIED_BUILTINS = frozenset(
    {
        "exec",
        "eval",
        "compile",
        "__import__",
        "open",
        "globals",
        "locals",
        "vars",
        "setattr",
        "delattr",
        "breakpoint",
        "input",
        "memoryview",
    }
)
#: Attribute names that reach interpreter internals, random-number state, out-of-band channels
#: between ranks, or native libraries.
DENIED_ATTRS = {
    "__globals__": "reaches module globals",
    "__builtins__": "reaches builtins",
    "__subclasses__": "walks the class hierarchy",
    "__code__": "rewrites code objects",
    "__dict__": "edits namespaces directly",
    "__closure__": "reaches closures",
    "_getframe": "inspects the caller's frames",
    "f_back": "inspects the caller's frames",
    "f_globals": "inspects the caller's frames",
    "f_locals": "inspects the caller's frames",
    "gi_frame": "inspects frames",
    "manual_seed": "changes the random-number state the inputs are drawn from",
    "seed": "changes the random-number state the inputs are drawn from",
    "set_rng_state": "changes the random-number state the inputs are drawn from",
    "get_rng_state": "reads the random-number state the inputs are drawn from",
    "initial_seed": "reads the seed the inputs are drawn from",
    "fork_rng": "changes the random-number state",
    "TCPStore": "opens a channel between ranks outside the collectives",
    "FileStore": "opens a channel between ranks outside the collectives",
    "HashStore": "opens a channel between ranks outside the collectives",
    "PrefixStore": "opens a channel between ranks outside the collectives",
    "_get_default_store": "opens a channel between ranks outside the collectives",
    "_share_cuda_": "shares memory between processes outside the collectives",
    "_new_shared_cuda": "shares memory between processes outside the collectives",
    "share_memory_": "shares memory between processes outside the collectives",
    "from_file": "reads files",
    "load_library": "loads native libraries",
    "system": "runs shell commands",
    "popen": "runs shell commands",
}
#: Fully qualified functions that read or write files (``tl.load`` and friends stay allowed).
DENIED_DOTTED = {
    "torch.load": "reads files",
    "torch.save": "writes files",
    "torch.utils.cpp_extension.load": "builds from files (use load_inline)",
    "numpy.load": "reads files",
    "numpy.save": "writes files",
    "numpy.savez": "writes files",
    "numpy.fromfile": "reads files",
    "numpy.memmap": "maps files",
}
#: Standard-library modules that other modules re-export (``torch.os``, ``torch.sys``,
#: ``numpy.ctypes``): reaching one through an allowed import is as good as importing it.
REEXPORTED_MODULES = frozenset(
    {
        "os", "sys", "ctypes", "subprocess", "importlib", "builtins", "gc", "inspect", "threading",
        "multiprocessing", "socket", "pickle", "signal", "shutil", "_thread", "io", "marshal", "runpy",
        "tempfile", "pathlib", "mmap", "resource", "platform", "sysconfig", "site", "weakref",
    }
)
#: Functions that fetch attributes by a name given at run time (``operator.attrgetter("sys")``).
INDIRECT_GETTERS = frozenset({"attrgetter", "methodcaller"})
#: Exception types a handler may swallow (optional imports).
SWALLOWABLE = frozenset({"ImportError", "ModuleNotFoundError"})
#: Tokens that must not appear in C++/CUDA sources given to load_inline.
NATIVE_DENIED = [
    (re.compile(r"\bdl(open|sym)\b"), "loads native symbols"),
    (re.compile(r"\b(system|popen|fork|vfork|execv\w*|posix_spawn\w*)\s*\("), "starts processes"),
    (re.compile(r"\b(fopen|open|creat|shm_open|mmap)\s*\("), "opens files or shared memory"),
    (re.compile(r"std::thread|pthread_create|#\s*include\s*<thread>"), "starts threads"),
    (re.compile(r"\bcuda(Event\w*|Ipc\w*)\b"), "touches timing events or IPC handles"),
    (re.compile(r"\bsocket\s*\("), "opens sockets"),
    (re.compile(r"\bsetenv\s*\(|\bputenv\s*\("), "changes the environment"),
]


@dataclass(frozen=True)
class Violation:
    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class _Checker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self.protected: set[str] = set()
        self.aliases: dict[str, str] = {}
        self.defines_model = False
        self.called: set[int] = set()  # ids of ``getattr`` names that are a call's function

    def flag(self, node: ast.AST, rule: str, message: str) -> None:
        self.violations.append(Violation(getattr(node, "lineno", 0), rule, message))

    # Imports -------------------------------------------------------------------------------
    def _check_module(self, node: ast.AST, name: str) -> None:
        top = name.split(".")[0]
        if top not in ALLOWED_MODULES:
            allowed = ", ".join(sorted(m for m in ALLOWED_MODULES if m != "__future__"))
            self.flag(node, "import", f"import of '{name}' is not allowed (candidates may import {allowed})")
            return
        for denied in DENIED_SUBMODULES:
            if name == denied or name.startswith(denied + "."):
                self.flag(node, "import", f"import of '{name}' is not allowed in a candidate")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)
            local = alias.asname or alias.name.split(".")[0]
            self.protected.add(local)
            self.aliases[local] = alias.name if alias.asname else local

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag(node, "import", "relative imports are not allowed in a candidate")
            return
        module = node.module or ""
        self._check_module(node, module)
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if module.split(".")[0] in ("torch", "numpy"):
                self._check_module(node, full)
            if full in DENIED_DOTTED:
                self.flag(node, "file", f"'{full}' {DENIED_DOTTED[full]}")
            if alias.name == "*":
                self.flag(node, "import", "star imports are not allowed in a candidate")
            if alias.name in DENIED_ATTRS and not (module.endswith("cpp_extension") and alias.name == "load_inline"):
                self.flag(node, "attribute", f"'{alias.name}' {DENIED_ATTRS[alias.name]}")
            if module == "os" and alias.name not in ALLOWED_OS_ATTRS:
                self.flag(node, "os", f"os.{alias.name} is not allowed in a candidate")
            if alias.name == "Model":
                self.flag(node, "reference", "imports the reference Model")
            self.protected.add(alias.asname or alias.name)
            self.aliases[alias.asname or alias.name] = full
            if alias.name in INDIRECT_GETTERS:
                self.flag(node, "builtin", f"'{full}' fetches attributes by computed name")

    # Names and attributes --------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "getattr" and id(node) not in self.called:
            # Handed on as a value (``functools.reduce(getattr, ...)``, ``g = getattr``), its
            # attribute names are no longer read here.
            self.flag(node, "builtin", f"'{node.id}' used other than as a direct call with a constant name")
        if node.id in DENIED_BUILTINS:
            self.flag(node, "builtin", f"'{node.id}' is not allowed in a candidate")
        if node.id == "__builtins__":
            self.flag(node, "builtin", "'__builtins__' is not allowed in a candidate")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        root = _root_name(node)
        if node.attr in INDIRECT_GETTERS:
            self.flag(node, "builtin", f"'.{node.attr}' fetches attributes by computed name")
        if node.attr in DENIED_ATTRS:
            self.flag(node, "attribute", f"'.{node.attr}' {DENIED_ATTRS[node.attr]}")
        if root == "os" and isinstance(node.value, ast.Name) and node.attr not in ALLOWED_OS_ATTRS:
            self.flag(node, "os", f"os.{node.attr} is not allowed in a candidate")
        if node.attr in REEXPORTED_MODULES and root in self.aliases:
            self.flag(node, "import", f"'{ast.unparse(node)}' reaches the {node.attr} module through another import")
        dotted = self._qualified(node)
        if dotted in DENIED_DOTTED:
            self.flag(node, "file", f"'{dotted}' {DENIED_DOTTED[dotted]}")
        self.generic_visit(node)

    def _qualified(self, node: ast.AST) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "getattr":
            self.called.add(id(func))
            if len(node.args) >= 2:
                name = node.args[1]
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                    self.flag(node, "builtin", f"{func.id} with a computed attribute name is not allowed")
                elif name.value in DENIED_ATTRS:
                    self.flag(node, "attribute", f"'{name.value}' {DENIED_ATTRS[name.value]}")
                elif name.value in REEXPORTED_MODULES:
                    self.flag(node, "import", f"{func.id}(..., {name.value!r}) reaches the {name.value} module through another import")
                elif name.value in DENIED_BUILTINS or name.value in ("getattr", "attrgetter", "methodcaller"):
                    self.flag(node, "builtin", f"{func.id}(..., {name.value!r}) reaches a denied builtin")
        self.generic_visit(node)

    # Writes to modules ------------------------------------------------------------------------
    def _check_target(self, target: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._check_target(elt)
            return
        if isinstance(target, ast.Starred):
            self._check_target(target.value)
            return
        if isinstance(target, ast.Attribute):
            root = _root_name(target)
            if root in self.protected:
                self.flag(target, "patch", f"assigns to '{ast.unparse(target)}', which patches a library")
            elif target.attr.startswith("__") and target.attr.endswith("__"):
                self.flag(target, "patch", f"assigns to '{ast.unparse(target)}', which patches a class")
        elif isinstance(target, ast.Subscript):
            root = _root_name(target.value)
            if root in self.protected:
                self.flag(target, "patch", f"writes into '{ast.unparse(target.value)}', which belongs to a library")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target)
        self._track_alias(node.targets, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target)
        if node.value is not None:
            self._track_alias([node.target], node.value)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def _track_alias(self, targets, value) -> None:
        if isinstance(value, (ast.Name, ast.Attribute)) and _root_name(value) in self.protected:
            for target in targets:
                if isinstance(target, ast.Name):
                    self.protected.add(target.id)

    # Exceptions, reference model -----------------------------------------------------------------
    def visit_Try(self, node: ast.Try) -> None:
        for handler in node.handlers:
            if _handler_reraises(handler):
                continue
            caught = _caught_names(handler)
            if caught and caught <= SWALLOWABLE:
                continue
            what = ", ".join(sorted(caught)) if caught else "every exception"
            self.flag(handler, "swallow", f"swallows {what} without re-raising")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            expr = item.context_expr
            name = ast.unparse(expr.func if isinstance(expr, ast.Call) else expr)
            if name.endswith("suppress"):
                self.flag(node, "swallow", f"'{name}' swallows exceptions")
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name == "Model":
            self.defines_model = True
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and len(node.value) > 40:
            for pattern, why in NATIVE_DENIED:
                match = pattern.search(node.value)
                if match:
                    self.flag(node, "native", f"native source uses '{match.group(0).strip()}', which {why}")


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _handler_reraises(handler: ast.ExceptHandler) -> bool:
    return any(isinstance(n, ast.Raise) for n in ast.walk(handler))


def _caught_names(handler: ast.ExceptHandler) -> set[str]:
    if handler.type is None:
        return set()
    nodes = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = set()
    for n in nodes:
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.Attribute):
            names.add(n.attr)
        else:
            return set()
    if names & {"Exception", "BaseException"}:
        return set()
    return names


#: The deepest syntax tree the checker walks (levels of nodes). Its walk is recursive: at Python's
#: default recursion limit it overflowed near 500 levels, and where something else in the process
#: had raised the limit, the same source walked through, so whether a deep candidate was rejected
#: depended on what ran before. The deepest file kloom holds is 91 levels deep.
MAX_NESTING = 300


def nested_deeper_than(tree: ast.AST, limit: int) -> bool:
    """Whether any node of ``tree`` lies more than ``limit`` levels below it (found without recursion)."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return False


def check_candidate(text: str, filename: str = "<candidate>") -> list[Violation]:
    """Return every reason to reject the candidate source; empty when it may run."""
    try:
        tree = ast.parse(text, filename=filename)
    except SyntaxError as exc:
        return [Violation(exc.lineno or 0, "syntax", f"syntax error: {exc.msg}")]
    except (RecursionError, MemoryError):  # the parser's stack, not the machine's memory
        return [Violation(0, "syntax", "cannot be parsed: its expressions are nested too deeply")]
    except ValueError as exc:
        return [Violation(0, "syntax", f"cannot be parsed: {exc}")]
    if nested_deeper_than(tree, MAX_NESTING):
        return [Violation(0, "syntax", f"cannot be checked: its expressions are nested too deeply (more than {MAX_NESTING} levels)")]
    try:
        return _checked(tree)
    except RecursionError:  # a source that parses can still be too deep for the recursive walk below
        return [Violation(0, "syntax", "cannot be checked: its expressions are nested too deeply")]


def _checked(tree: ast.Module) -> list[Violation]:
    checker = _Checker()
    # Imports first, so that aliases are known wherever they are used.
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            checker.visit(node)
    protected_after_imports = set(checker.protected)
    checker.violations.clear()
    checker.protected = protected_after_imports
    checker.visit(tree)
    if not checker.defines_model:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "Model" and isinstance(node.ctx, ast.Load):
                checker.flag(node, "reference", "uses the reference Model (the candidate must compute the result itself)")
                break
    unique: dict[tuple[int, str], Violation] = {}
    for v in checker.violations:
        unique.setdefault((v.line, v.message), v)
    return sorted(unique.values(), key=lambda v: v.line)
