"""Reading model answers: the planner's JSON object and the coder's Python block.

Both readers return a value or a reason it could not be read (``ParseFailure``); they never raise
on what the model wrote.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+\-]*)[^\n]*\n(.*?)```", re.DOTALL)
_PYTHON_TAGS = frozenset({"python", "py", "python3"})
#: A planner strategy of this name means "nothing left worth trying".
STOP_WORDS = frozenset({"stop", "none", "done"})


@dataclass
class ParseFailure:
    reason: str


@dataclass
class PlanAnswer:
    strategy: str
    params: dict[str, Any] = field(default_factory=dict)
    rationale: str = ""
    base_step: int | None = None

    @property
    def stops(self) -> bool:
        return self.strategy.strip().lower() in STOP_WORDS


def read_plan(text: str) -> PlanAnswer | ParseFailure:
    """The first JSON object in the answer (fenced or bare) with a ``strategy``."""
    if not text.strip():
        return ParseFailure("empty answer")
    objects = _json_objects(text)
    if not objects:
        return ParseFailure("no JSON object in the answer")
    data = next((o for o in objects if "strategy" in o), None)
    if data is None:
        return ParseFailure(f"the JSON object has no 'strategy' (keys: {', '.join(sorted(objects[0])) or 'none'})")
    strategy = data["strategy"]
    if not isinstance(strategy, str) or not strategy.strip():
        return ParseFailure("'strategy' must be a non-empty string")
    params = data.get("params") or {}
    if not isinstance(params, dict):
        return ParseFailure(f"'params' must be an object, not {type(params).__name__}")
    rationale = data.get("rationale") or ""
    if not isinstance(rationale, str):
        rationale = json.dumps(rationale)
    base_step = data.get("base_step")
    if base_step is not None and (isinstance(base_step, bool) or not isinstance(base_step, int)):
        return ParseFailure(f"'base_step' must be a step index or null, not {base_step!r}")
    return PlanAnswer(strategy=strategy.strip(), params=params, rationale=rationale.strip(), base_step=base_step)


def _json_objects(text: str) -> list[dict[str, Any]]:
    """JSON objects in fenced blocks first, then any bare object in the text."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    sources = [body for _, body in _FENCE.findall(text)] + [text]
    for source in sources:
        start = source.find("{")
        while start != -1:
            try:
                value, end = decoder.raw_decode(source, start)
            except json.JSONDecodeError:
                start = source.find("{", start + 1)
                continue
            if isinstance(value, dict):
                found.append(value)
            start = source.find("{", end)
    return found


def read_code(text: str, *, truncated: bool = False) -> str | ParseFailure:
    """The Python block of the answer that defines ``ModelNew`` at module level."""
    if not text.strip():
        return ParseFailure("empty answer")
    blocks = _FENCE.findall(text)
    python = [body for tag, body in blocks if tag.lower() in _PYTHON_TAGS]
    candidates = python or [body for tag, body in blocks if not tag]
    if not candidates:
        if truncated or re.search(r"```[ \t]*(python|py)", text):
            return ParseFailure("the answer was cut off before its code block ended (output-token limit)")
        return ParseFailure("no ```python code block in the answer")
    defining = [body for body in candidates if "ModelNew" in body]
    if not defining:
        return ParseFailure("the code block defines no ModelNew class")
    code = defining[-1].strip() + "\n"
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        why = f"the code does not parse: line {exc.lineno}: {exc.msg}"
        if truncated:
            why += " (the answer was cut off at the output-token limit)"
        return ParseFailure(why)
    except (RecursionError, MemoryError):  # the parser's stack, not the machine's memory
        return ParseFailure("the code does not parse: its expressions are nested too deeply")
    except ValueError as exc:
        return ParseFailure(f"the code does not parse: {exc}")
    if not any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body):
        return ParseFailure("the code defines no ModelNew class at module level")
    return code
