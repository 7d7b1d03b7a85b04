"""Layers import downward: the core (``kloom/``'s formats and records, below its ``cli/`` and
``batch/``) imports none of the layers above it; the agents and the knowledge base sit above the
core and beside the evaluator, which they reach only through what the worker or the CLI passes in.
"""

from __future__ import annotations

import ast
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
