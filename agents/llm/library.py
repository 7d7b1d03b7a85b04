"""kloom's kernel library as the LLM coder sees it: the templates that apply to the traced
workload, each with its entry function's signature and documentation and a worked example (the
call kloom's own strategist writes for this workload), and the embedding of the library's modules
into a candidate that calls them.

The model may call a library function without copying its module: ``complete_candidate`` appends
the source of every offered module whose entry functions the candidate calls but does not define
(the same text the offline strategist embeds), so what the evaluator runs is one self-contained
file, checked like any other.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from agents.strategist.embed import EmbedError, bound_names, embed_kernels, module_file
from agents.strategist.triton_kernels.plan import Measured, find_matches, measured_kinds
from agents.strategist.triton_kernels.templates import TEMPLATES
from kloom.opgraph import OpGraph

#: Characters of a function's documentation kept in the prompt.
DOC_CLIP = 1600


@dataclass(frozen=True)
class LibraryTemplate:
    """One template that applies to the workload, as the prompt shows it."""

    template: str
    kind: str
    module: str
    entry: str  # the function the example calls
    signature: str  # its ``def`` line(s) and docstring
    example: str  # the statement(s) kloom's strategist writes for this workload
    legend: str  # what the example's variables are
    rationale: str
    verdict: str  # what the GPU benchmark measured of its kind ("" when not measured)


class _ExampleNames:
    """Readable names for the example: the forward's inputs and the module's attributes by what
    they are, other values by their tensor id."""

    def __init__(self, graph: OpGraph):
        self.graph = graph
        self.used: dict[int, str] = {}
        self.leaves = {leaf.tensor: leaf for leaf in graph.leaves}

    def read(self, tensor: int) -> str:
        leaf = self.leaves.get(tensor)
        if leaf is not None and leaf.kind == "input":
            name = f"x{leaf.position}"
        elif leaf is not None and leaf.name:
            name = "self." + leaf.name
        else:
            name = f"t{tensor}"
        self.used[tensor] = name
        return name

    def define(self, tensor: int) -> str:
        self.used[tensor] = f"t{tensor}"
        return f"t{tensor}"

    def legend(self) -> str:
        parts = []
        for tid, name in self.used.items():
            info = self.graph.tensors[tid]
            parts.append(f"`{name}`: {list(info.shape)} {info.dtype}")
        return "; ".join(parts)


def _entry(statement: str) -> str:
    match = re.search(r"=\s*([A-Za-z_]\w*)\(", statement)
    return match.group(1) if match else ""


def signature(module: str, name: str) -> str:
    """The ``def`` line(s) and docstring of the top-level function ``name`` of a kernel module
    (read from its source: the strategist does not import Triton)."""
    source = module_file(module).read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            lines = source.splitlines()
            body_start = node.body[0].lineno - 1
            header = "\n".join(lines[node.lineno - 1 : body_start])
            doc = ast.get_docstring(node) or ""
            if len(doc) > DOC_CLIP:
                doc = doc[:DOC_CLIP] + " [...]"
            return f'{header}\n    """{doc}"""'
    return ""


def _verdict(kind: str, wins: dict[str, Measured], template) -> str:
    verdict = wins.get(kind)
    if verdict is None:
        return "" if template.offered_unmeasured else "not yet measured on the GPU; kloom's own strategist waits for a measured win"
    return verdict.evidence() + ("" if verdict.wins else "; kloom's own strategist does not use it")


def applicable_templates(graph: OpGraph | None) -> list[LibraryTemplate]:
    """The library's templates that match the traced graph, whatever the GPU benchmark said of
    them (the verdict is shown), largest saving first."""
    if graph is None:
        return []
    wins = measured_kinds()
    everything = frozenset(t.kind for t in TEMPLATES.values())
    found = []
    for match in find_matches(graph, wins=wins, force=everything).matches:
        names = _ExampleNames(graph)
        try:
            example = "\n".join(match.emit(names))
            module = match.modules[0]
            entry = _entry(example)
            found.append(
                LibraryTemplate(
                    template=match.template,
                    kind=match.kind,
                    module=module,
                    entry=entry,
                    signature=signature(module, entry),
                    example=example,
                    legend=names.legend(),
                    rationale=match.rationale,
                    verdict=_verdict(match.kind, wins, TEMPLATES[match.template]),
                )
            )
        except (EmbedError, KeyError, IndexError):
            continue  # a template whose module or call cannot be shown is left out
    return found


def complete_candidate(code: str, offered: list[LibraryTemplate]) -> str:
    """``code`` with the source of each offered module whose entry function it calls but does not
    define appended (dependencies first, each once)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return code  # the evaluator's static check says why
    defined = bound_names(code)
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    modules = sorted({t.module for t in offered if t.entry in called and t.entry not in defined})
    if not modules:
        return code
    return code.rstrip() + "\n\n\n# ---- kloom kernel library (embedded by kloom) ----\nimport torch\n" + embed_kernels(modules)
