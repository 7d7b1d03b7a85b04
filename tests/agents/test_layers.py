"""Layers import downward: the core (``kloom/``'s formats and records, below its ``cli/`` and
``batch/``) imports none of the layers above it; the agents and the knowledge base sit above the
core and beside the evaluator, which they reach only through what the worker or the CLI passes in.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The application on top of the core inside ``kloom/``.
APPLICATION = ("kloom/cli", "kloom/batch")


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [a.name for a in node.names] if isinstance(node, ast.Import) else []
        found |= set(names)
    return found


def _modules(*tops: str):
    for top in tops:
        for path in (ROOT / top).rglob("*.py"):
            if not path.name.startswith("test_"):
                yield str(path.relative_to(ROOT)), path


def test_agents_and_the_kb_import_no_service():
    seen = {(rel, m) for rel, path in _modules("agents", "kb") for m in _imports(path) if m.split(".")[0] == "services"}
    assert not seen


def test_the_core_imports_no_layer_above_it():
    above = ("agents", "kb", "services", "kloom.cli", "kloom.batch")
    seen = {
        (rel, m)
        for rel, path in _modules("kloom")
        if not rel.startswith(APPLICATION)
        for m in _imports(path)
        if any(m == a or m.startswith(a + ".") for a in above)
    }
    assert not seen


# Imports inside functions ------------------------------------------------------------------------
#: The reasons an import may sit inside a function, as a comment on its line: it is deferred for
#: start-up cost (``kloom --help`` without torch, the API without torch or the agents' loop), its
#: package may be absent (triton, pynvml, litellm, ...), or it must follow some process set-up (an
#: environment variable, a backend choice). Any other import belongs at the top of its module; one
#: moved inside a function to dodge an import cycle hides a layering fault instead of fixing it.
REASONS = ("# lazy:", "# optional:", "# after setup:")
PRODUCT = ("agents", "kb", "kloom", "services", "kernels")


def _comments(source: str) -> dict[int, str]:
    """Each line's comment (``#`` to the end of the line)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.start[0]: t.string for t in tokens if t.type == tokenize.COMMENT}


def _function_imports(tree: ast.AST, inside: bool = False):
    """Import statements inside a function (or a function nested in one)."""
    for node in ast.iter_child_nodes(tree):
        if inside and isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _function_imports(node, inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))


def _unexplained_function_imports() -> set[tuple[str, int, str]]:
    """(file, line, module) of every in-function import of product code with no reason comment."""
    found = set()
    for rel, path in _modules(*PRODUCT):
        source = path.read_text()
        comments = _comments(source)
        for node in _function_imports(ast.parse(source)):
            lines = range(node.lineno, node.end_lineno + 1)
            if any(comments.get(line, "").startswith(REASONS) for line in lines):
                continue
            if isinstance(node, ast.ImportFrom):
                names = ["." * node.level + (node.module or node.names[0].name)]
            else:
                names = [alias.name for alias in node.names]
            found |= {(rel, node.lineno, name) for name in names}
    return found


def test_imports_inside_functions_say_why():
    unexplained = sorted(_unexplained_function_imports())
    assert not unexplained, "imports inside functions with no reason comment (move them to the top of the module):\n" + "\n".join(
        f"{rel}:{line} {m}" for rel, line, m in unexplained
    )
