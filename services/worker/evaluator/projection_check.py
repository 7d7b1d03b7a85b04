"""The judge's side of the projections (``projection.py``): the bounds an honest candidate stays
within, the numbers a block's reply carries, and the check of a candidate's against the reference's.

Per timed call and tensor leaf both sides send ``p = sum_j r_j w_j`` and ``p2 = sum_j r'_j w_j^2``
(two independent +-1 sign vectors). The reference also sends, from the leaf's tolerance ``t_j =
atol + rtol |w_j|`` (as ``compare.compare_leaf`` applies it):

- ``b = sqrt(sum_j t_j^2)``: a candidate within tolerance has ``|x_j - w_j| <= t_j``, so ``p_c -
  p_r = sum_j r_j d_j`` is a sum of independent terms bounded by ``t_j`` and by Hoeffding ``|p_c
  - p_r| > K b`` with probability at most ``2 exp(-K^2 / 2)``;
- ``b2 = sqrt(sum_j (t_j (2 |w_j| + t_j))^2)``: ``|x_j^2 - w_j^2| = |d_j| |2 w_j + d_j| <= t_j (2
  |w_j| + t_j)``, the same argument for ``p2``. Expanded, ``t (2|w| + t) = A + B |w| + C w^2``
  with ``A = atol^2``, ``B = 2 atol (1 + rtol)``, ``C = rtol (2 + rtol)``, and its square sums
  to power sums of ``|w|`` up to the fourth, which the projection accumulates in the same pass;
- ``s = sum_j |w_j|`` and ``s2 = sum_j w_j^2``: the scale of float64's rounding of ``p`` and
  ``p2`` (``ROUNDING``).

Integer and bool leaves have tolerance 0: both projections must match to rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: Relative float64 rounding allowed on either projection (times ``s`` or ``s2``), plus an
#: absolute floor.
ROUNDING = 1e-9
FLOOR = 1e-12


@dataclass(frozen=True)
class LeafShape:
    """What turns a leaf's power sums into its bounds: its element count and tolerance."""

    numel: int
    complex: bool
    atol: float
    rtol: float

    def bound(self, s1: float, s2: float) -> float:
        """``sqrt(sum_j (atol + rtol |w_j|)^2)`` from ``s1 = sum_j |w_j|`` and ``s2 = sum_j w_j^2``
        over the real elements. A complex element's error is bounded by atol + rtol times its
        modulus in each of its two parts; the sum of the moduli is at most ``s1``."""
        squares = self.numel * self.atol**2 + 2 * self.atol * self.rtol * s1 + self.rtol**2 * s2
        return math.sqrt(max(0.0, (2.0 if self.complex else 1.0) * squares))

    def square_bound(self, s1: float, s2: float, s3: float, s4: float) -> float:
        """``sqrt(sum_j (t_j (2 |w_j| + t_j))^2)`` from the power sums ``s_k = sum_j |w_j|^k`` of
        the real elements. Complex: each part ``x`` of an element of modulus ``m`` has ``|x_c^2 -
        x_r^2| <= t(m) (2 m + t(m))``; over the elements ``sum m <= s1``, ``sum m^2 = s2``, ``sum
        m^3 <= sqrt(2) s3`` (power means) and ``sum m^4 <= 2 s4``."""
        a, b, c = self.atol**2, 2 * self.atol * (1 + self.rtol), self.rtol * (2 + self.rtol)
        m3, m4 = (math.sqrt(2) * s3, 2 * s4) if self.complex else (s3, s4)
        squares = self.numel * a * a + 2 * a * b * s1 + (b * b + 2 * a * c) * s2 + 2 * b * c * m3 + c * c * m4
        return math.sqrt(max(0.0, (2.0 if self.complex else 1.0) * squares))


@dataclass(frozen=True)
class Projections:
    """One block's numbers, per timed call and tensor leaf: ``p`` and ``p2`` (both sides);
    ``bound``, ``bound2``, ``total`` and ``total2`` (``b``, ``b2``, ``s``, ``s2``: the
    reference's; a candidate's are not sent)."""

    p: list[list[float]]
    p2: list[list[float]]
    bound: list[list[float]]
    bound2: list[list[float]]
    total: list[list[float]]
    total2: list[list[float]]

    def reply(self, bounds: bool) -> dict:
        out = {"projections": self.p, "square_projections": self.p2}
        if bounds:
            out.update(bounds=self.bound, square_bounds=self.bound2, totals=self.total, square_totals=self.total2)
        return out

    @classmethod
    def from_reply(cls, reply: dict, bounds: bool) -> "Projections":
        """Read from a rank's reply; ``ValueError`` where a table is not a list of lists of
        numbers, or the tables differ in shape."""
        names = ["projections", "square_projections"] + (["bounds", "square_bounds", "totals", "square_totals"] if bounds else [])
        tables = [_table(reply.get(name), name) for name in names]
        shape = [len(row) for row in tables[0]]
        if any([len(row) for row in table] != shape for table in tables[1:]):
            raise ValueError(f"{', '.join(names)} differ in shape")
        if not bounds:
            zeros = [[0.0] * n for n in shape]
            tables += [zeros] * 4
        p, p2, bound, bound2, total, total2 = tables
        return cls(p=p, p2=p2, bound=bound, bound2=bound2, total=total, total2=total2)

    @property
    def shape(self) -> list[int]:
        return [len(row) for row in self.p]

    def finite(self) -> bool:
        tables = (self.p, self.p2, self.bound, self.bound2, self.total, self.total2)
        return all(math.isfinite(x) for table in tables for row in table for x in row)


def _table(value: Any, name: str) -> list[list[float]]:
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        raise ValueError(f"{name}: expected a list of lists, got {type(value).__name__}")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for row in value for x in row):
        raise ValueError(f"{name}: expected numbers")
    return [[float(x) for x in row] for row in value]


#: The projections by name, as the judge's messages give them.
LINEAR, QUADRATIC = "linear (signed sum)", "quadratic (signed sum of squares)"


@dataclass(frozen=True)
class Mismatch:
    """A call whose projection ``projection`` (``LINEAR`` or ``QUADRATIC``) is off the
    reference's by more than allowed."""

    call: int
    leaf: int
    projection: str
    got: float
    want: float
    allowed: float

    @property
    def off(self) -> float:
        return abs(self.got - self.want)


def allowed(bound: float, total: float, sigmas: float) -> float:
    return sigmas * bound + ROUNDING * total + FLOOR


def first_mismatch(got: Projections, want: Projections, sigmas: float) -> Mismatch | None:
    """The first call and leaf where either of the candidate's projections is not within
    ``sigmas`` bounds (plus rounding) of the reference's; NaN never is. Shapes must agree
    (``shape_problem``)."""
    for call in range(len(want.p)):
        for leaf in range(len(want.p[call])):
            for name, mine, ref, bound, total in ((LINEAR, got.p, want.p, want.bound, want.total),
                                                  (QUADRATIC, got.p2, want.p2, want.bound2, want.total2)):
                limit = allowed(bound[call][leaf], total[call][leaf], sigmas)
                if not abs(mine[call][leaf] - ref[call][leaf]) <= limit:
                    return Mismatch(call=call, leaf=leaf, projection=name, got=mine[call][leaf], want=ref[call][leaf],
                                    allowed=limit)
    return None


def shape_problem(got: Projections, want: Projections) -> str:
    """Why the candidate's numbers cannot be compared with the reference's ("" when they can)."""
    if len(got.p) != len(want.p) or len(got.p2) != len(want.p):
        return f"{len(got.p)} calls' projections ({len(got.p2)} of squares) for {len(want.p)} timed calls"
    for call, (a, a2, b) in enumerate(zip(got.shape, map(len, got.p2), want.shape)):
        if a != b or a2 != b:
            return f"timed call {call}: {a} projections ({a2} of squares) for {b} tensor outputs"
    return ""
