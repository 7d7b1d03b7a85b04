"""Layers import downward: the agents and the knowledge base sit above the core (``kloom/``'s
formats and records) and beside the evaluator, which they reach through what the worker passes in.
"""

from __future__ import annotations

import ast
from pathlib import Path

from kloom.opgraph import VIEW_OPS
from services.worker.evaluator.tracing import VIEW_LIKE

ROOT = Path(__file__).resolve().parents[2]
#: Imports of the worker that remain, each with why (issue 23, item 4): to remove, not to add to.
REMAINING = {
    ("agents/strategist/offline.py", "services.worker.evaluator.static_check"),  # the candidate format's checker: belongs in the core
    ("agents/llm/views.py", "services.worker.evaluator"),  # the same checker's allow-lists, for the coder's prompt
}


def _worker_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names] if isinstance(node, ast.Import) else []
        found |= {n for n in names if n.startswith("services.worker")}
    return found


def test_agents_and_the_kb_import_the_worker_only_where_listed():
    seen = set()
    for top in ("agents", "kb"):
        for path in (ROOT / top).rglob("*.py"):
            if path.name.startswith("test_"):
                continue
            seen |= {(str(path.relative_to(ROOT)), m) for m in _worker_imports(path)}
    assert seen == REMAINING


def test_the_core_names_the_view_operators_the_tracer_names():
    assert VIEW_OPS == VIEW_LIKE  # until the tracer imports kloom.opgraph.VIEW_OPS itself
