"""The option record: one concrete thing the offline strategist may try (``catalog.py`` lists
them; strategy folders make them without importing the catalog)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agents.analysis import Analysis


@dataclass
class Option:
    """One concrete thing to try: a strategy with its parameters and why it might pay."""

    strategy: str
    params: dict[str, Any]
    score: float
    rationale: str
    base: str | None = None  # a strategy this refines (tried after it wins)
    #: Seconds its candidate's first call is expected to spend compiling before it computes
    #: (kloom's kernels: ``triton_kernels/compile_cost.py``); 0 where not estimated.
    setup_s: float = 0.0

    @property
    def key(self) -> str:
        return option_key(self.strategy, self.params)


def option_key(strategy: str, params: dict[str, Any]) -> str:
    """The identity of an option: its strategy and parameters."""
    return f"{strategy}:{json.dumps(params, sort_keys=True)}"


def rewrite_options(a: Analysis, rewrite: str, score: float, why: str, compiled_score: float | None = None) -> list[Option]:
    """A source rewrite on its own, and (where there is elementwise work to fuse) compiled.
    ``compiled_score``: the compiled variant's prior, for a rewrite that itself makes the
    elementwise work inductor fuses (then the variant is offered whatever the trace counted)."""
    params = {"wrapper": "none", "rewrites": [rewrite]}
    opts = [Option(rewrite, params, score, why)]
    if compiled_score is None and a.n_elementwise >= 2:
        compiled_score = score - 0.05 + 0.02 * min(a.n_elementwise, 10)
    if compiled_score is not None:
        dynamic = {} if a.graph_capturable else {"dynamic": True}
        opts.append(
            Option(
                f"{rewrite}_compiled",
                dict(params, wrapper="compile", compile_mode="default", **dynamic),
                compiled_score,
                why + ", and the elementwise work around it fused by inductor",
            )
        )
    return opts
