"""Prompt templates of the LLM roles: Jinja2 files beside this module, rendered strictly.

``StrictUndefined`` turns a missing or misspelt variable into an error at render time instead of
a silently empty prompt.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

TEMPLATE_DIR = Path(__file__).parent


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The shared Jinja2 environment over ``agents/prompts``."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,  # prompts are plain text, not HTML
    )


def render(name: str, **context: Any) -> str:
    """Render ``agents/prompts/<name>`` with ``context``; raises on any undefined variable."""
    return environment().get_template(name).render(**context).strip() + "\n"
