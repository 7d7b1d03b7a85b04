"""How much to trust a strategy, computed from its evidence (never asserted).

A strategy's confidence for a workload is the Wilson score lower bound of its win rate, where
each piece of evidence (one job where it was tried) counts with the similarity of that job's
workload to the one being planned. Few or distant results therefore give a low confidence even
when they were all wins; many close wins approach the observed win rate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

#: One-sided 95%: the planner should rather under- than over-trust a strategy.
Z = 1.645


def wilson_lower_bound(wins: float, trials: float, z: float = Z) -> float:
    """Lower bound of the win rate's Wilson score interval; 0 with no trials.

    ``wins`` and ``trials`` may be fractional (similarity-weighted counts).
    """
    if trials <= 0:
        return 0.0
    p = min(max(wins / trials, 0.0), 1.0)
    z2 = z * z
    centre = p + z2 / (2 * trials)
    margin = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    return max(0.0, (centre - margin) / (1 + z2 / trials))


def weighted_confidence(evidence: Iterable[tuple[bool, float]]) -> float:
    """Confidence from ``(won, weight)`` pairs, each weight the evidence's similarity in [0, 1]."""
    wins = trials = 0.0
    for won, weight in evidence:
        trials += weight
        wins += weight if won else 0.0
    return wilson_lower_bound(wins, trials)
