"""Random projections of every timed call's outputs, so that the judge checks each call cheaply.

Per timed call and tensor leaf, both sides compute ``p = sum_j r_j * out_j`` in float64, where
``r_j = +-1`` is a hash of the block's projection seed (drawn by the judge at random, per block),
the leaf's position in the flattened outputs and the element's row-major index ``j``: the same
signs on either side, whatever the tensors' strides or the chunks they are read in. The reference
also gives ``b = sqrt(sum_j (atol + rtol * |w_j|)^2)`` (the leaf's tolerance, as
``compare.compare_leaf`` applies it) and ``s = sum_j |w_j|``. A candidate whose every element is
within tolerance of the reference's differs from it by ``sum_j r_j d_j`` with ``|d_j| <=
atol + rtol * |w_j|``, so by Hoeffding ``|p_c - p_r| > K * b`` with probability at most
``2 exp(-K^2 / 2)``; outputs of other inputs (a previous call's, returned again) differ by far
more. ``s`` bounds float64's rounding of the sums (``ROUNDING``).

Elements are read in chunks of at most ``CHUNK`` (1M; each converted to float64, with its signs), so
no buffer of the outputs' full size is made (on a GPU one Triton kernel per piece hashes the
indices in registers instead: ``projection_kernel.py``); complex leaves are read as their real view, bool
and integer leaves as float64 (their tolerance is 0: exact). Non-tensor leaves are skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

import torch

#: Elements read at once: the scratch of a call's projection is a few float64 and int64 buffers
#: of this many elements (8 MiB each, about 32 MiB at most while signs are hashed), outside the
#: device-memory account of either side.
CHUNK = 1 << 20
#: On a GPU: elements per kernel launch of a contiguous leaf (read in place), and per copied piece
#: of a strided one (the only scratch there, besides a float64 triple per 4096 elements).
GPU_PIECE = 1 << 26
GPU_COPY = 1 << 22
#: Signs kept between the calls of a block, in elements (small leaves hash their indices once).
SIGN_CACHE = CHUNK
#: Relative float64 rounding allowed on ``sum_j r_j w_j`` (times ``s``), plus an absolute floor.
ROUNDING = 1e-9
FLOOR = 1e-12
#: The tolerance of a floating dtype missing from the table (``compare.compare_leaf``'s).
FALLBACK_TOLERANCE = (1e-5, 1.3e-6)

_MASK = 0xFFFFFFFF
# Odd multipliers below 2**31: a 32-bit value times one stays inside int64.
_M1, _M2 = 0x7FEB352D, 0x2C1B3C6D


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def _key(seed: int, leaf: int, high: int) -> int:
    """A 32-bit key for the indices of ``leaf`` whose upper 32 bits are ``high``."""
    return _splitmix64(_splitmix64(_splitmix64(int(seed)) ^ int(leaf)) ^ int(high)) & _MASK


def _mix(x: torch.Tensor, tmp: torch.Tensor) -> torch.Tensor:
    """An avalanche of 32-bit values held in int64, in place (``tmp``: scratch of x's size)."""
    for shift, multiplier in ((16, _M1), (15, _M2), (16, _M1)):
        x.bitwise_xor_(torch.bitwise_right_shift(x, shift, out=tmp)).mul_(multiplier).bitwise_and_(_MASK)
    return x.bitwise_xor_(torch.bitwise_right_shift(x, 15, out=tmp))


def signs(seed: int, leaf: int, start: int, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``r_j`` (float64 +-1) for indices ``start`` .. ``start + n - 1`` of ``leaf``."""
    out = torch.empty(n, dtype=torch.float64, device=device)
    x = torch.empty(n, dtype=torch.int64, device=device)
    tmp = torch.empty(n, dtype=torch.int64, device=device)
    for done, size, first in _spans(start, n):
        low = first & _MASK
        piece = torch.arange(low, low + size, dtype=torch.int64, device=device, out=x[:size])
        piece.bitwise_xor_(_key(seed, leaf, first >> 32))
        _mix(piece, tmp[:size]).bitwise_right_shift_(31)  # the top bit of the 32
        out[done:done + size].copy_(piece).mul_(-2.0).add_(1.0)
    return out


def _spans(start: int, n: int) -> Iterator[tuple[int, int, int]]:
    """(offset, size, first index) of the spans of indices ``start`` .. ``start + n - 1`` that do
    not cross a multiple of 2**32 (a span's key holds the indices' upper bits)."""
    done = 0
    while done < n:
        first = start + done
        size = min(n - done, (((first >> 32) + 1) << 32) - first)
        yield done, size, first
        done += size


def _total(parts: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The sum of a leaf's per-piece (p, s, q)."""
    if not parts:
        return torch.zeros(3, dtype=torch.float64, device=device)
    return parts[0] if len(parts) == 1 else torch.stack(parts).sum(0)


def _chunks(t: torch.Tensor, limit: int, offset: int = 0) -> Iterator[tuple[int, torch.Tensor]]:
    """``(start, elements)``: ``t`` in row-major order, at most ``limit`` elements at a time, each
    piece flat (a copy of at most ``limit`` elements where ``t`` is not contiguous)."""
    if t.dim() == 0:
        yield offset, t.reshape(1)
        return
    if t.is_contiguous():
        flat = t.view(-1)
        for start in range(0, flat.numel(), limit):
            yield offset + start, flat[start:start + limit]
        return
    inner = t[0].numel() if t.shape[0] else 0
    if inner == 0:
        return
    if inner > limit:
        for i in range(t.shape[0]):
            yield from _chunks(t[i], limit, offset + i * inner)
        return
    rows = max(1, limit // inner)
    for i in range(0, t.shape[0], rows):
        yield offset + i * inner, t[i:i + rows].reshape(-1)


def _real_chunks(t: torch.Tensor, limit: int, device: torch.device) -> Iterator[tuple[int, torch.Tensor]]:
    """``(start, float64 elements on device)`` of a leaf's real view: a complex element ``k`` is
    the real elements ``2k`` and ``2k + 1``."""
    if t.is_complex():
        for start, piece in _chunks(t, max(1, limit // 2)):
            yield 2 * start, torch.view_as_real(piece.resolve_conj().resolve_neg()).reshape(-1).to(device, torch.float64)
    else:
        for start, piece in _chunks(t, limit):
            yield start, piece.to(device, torch.float64)


def leaf_tolerance(t: torch.Tensor, table: dict[torch.dtype, tuple[float, float]] | None) -> tuple[float, float]:
    """(atol, rtol) the judge applies to a leaf of ``t``'s dtype (integers and bools: exact)."""
    if table is None or not (t.is_floating_point() or t.is_complex()):
        return 0.0, 0.0
    atol, rtol = table.get(t.dtype, FALLBACK_TOLERANCE)
    return float(atol), float(rtol)


@dataclass(frozen=True)
class LeafShape:
    """What turns a leaf's sums into its bound: its element count and tolerance."""

    numel: int
    complex: bool
    atol: float
    rtol: float

    def bound(self, s: float, q: float) -> float:
        """``sqrt(sum_j (atol + rtol |w_j|)^2)`` from ``s = sum_j |w_j|`` and ``q = sum_j w_j^2``
        over the real elements. A complex element's error is bounded by atol + rtol times its
        modulus in each of its two parts; the sum of the moduli is at most ``s``."""
        squares = self.numel * self.atol**2 + 2 * self.atol * self.rtol * s + self.rtol**2 * q
        return math.sqrt(max(0.0, (2.0 if self.complex else 1.0) * squares))


class Projector:
    """The projections of one block's timed calls: ``add`` after each call (device work only),
    ``finish`` once (one copy to the host)."""

    def __init__(self, seed: int, device: torch.device | str, tolerance: dict[torch.dtype, tuple[float, float]] | None = None,
                 chunk: int = CHUNK, cache: int = SIGN_CACHE):
        self.seed, self.device, self.tolerance = int(seed), torch.device(device), tolerance
        self.chunk, self.cache_limit = max(1, int(chunk)), int(cache)
        self._signs: dict[tuple[int, int, int], torch.Tensor] = {}
        self._cached = 0
        self._calls: list[torch.Tensor] = []  # per call: (leaves, 3) float64 on the device: p, s, q
        self._shapes: list[list[LeafShape]] = []

    def _r(self, leaf: int, start: int, n: int) -> torch.Tensor:
        key = (leaf, start, n)
        r = self._signs.get(key)
        if r is None:
            r = signs(self.seed, leaf, start, n, self.device)
            if self._cached + n <= self.cache_limit:
                self._signs[key] = r
                self._cached += n
        return r

    def leaf(self, position: int, t: torch.Tensor) -> torch.Tensor:
        """(p, s, q) of one tensor leaf, float64 on its device."""
        t = t.detach()
        if t.is_cuda and self.device.type == "cuda":
            return self._leaf_on_gpu(position, t)
        parts = []
        for start, x in _real_chunks(t, self.chunk, self.device):
            r = self._r(position, start, x.numel())
            parts.append(torch.stack([torch.dot(x, r), torch.linalg.vector_norm(x, 1), torch.dot(x, x)]))
        return _total(parts, self.device)

    def _leaf_on_gpu(self, position: int, t: torch.Tensor) -> torch.Tensor:
        """``leaf`` by one Triton kernel per piece (``projection_kernel``): the same numbers, with
        no sign or float64 buffers (a contiguous leaf is read in place)."""
        from .projection_kernel import project_piece

        if t.is_complex():
            t = torch.view_as_real(t.resolve_conj().resolve_neg())
        parts = []
        for start, piece in _chunks(t, GPU_PIECE if t.is_contiguous() else GPU_COPY):
            for done, size, first in _spans(start, piece.numel()):
                parts.append(project_piece(piece[done:done + size], first & _MASK, _key(self.seed, position, first >> 32)))
        return _total(parts, t.device)

    def add(self, leaves: list[Any]) -> None:
        """One call's flattened outputs."""
        rows, shapes = [], []
        for position, leaf in enumerate(leaves):
            if not isinstance(leaf, torch.Tensor):
                continue
            rows.append(self.leaf(position, leaf))
            shapes.append(LeafShape(leaf.numel(), leaf.is_complex(), *leaf_tolerance(leaf, self.tolerance)))
        self._calls.append(torch.stack(rows) if rows else torch.zeros(0, 3, dtype=torch.float64, device=self.device))
        self._shapes.append(shapes)

    def finish(self) -> "Projections":
        """Every call's numbers, moved to the host at once."""
        flat = torch.cat([c.reshape(-1) for c in self._calls]).cpu().tolist() if self._calls else []
        p, bound, total = [], [], []
        at = 0
        for shapes in self._shapes:
            row = flat[at:at + 3 * len(shapes)]
            at += 3 * len(shapes)
            p.append(row[0::3])
            total.append(row[1::3])
            bound.append([shape.bound(s, q) for shape, s, q in zip(shapes, row[1::3], row[2::3])])
        self._calls, self._shapes = [], []
        return Projections(p=p, bound=bound, total=total)


def project(leaves: list[Any], seed: int, tolerance: dict[torch.dtype, tuple[float, float]] | None = None,
            chunk: int = CHUNK) -> "Projections":
    """One call's projections (a block of one call)."""
    devices = [x.device for x in leaves if isinstance(x, torch.Tensor)]
    projector = Projector(seed, devices[0] if devices else "cpu", tolerance, chunk)
    projector.add(leaves)
    return projector.finish()


@dataclass(frozen=True)
class Projections:
    """One block's numbers, per timed call and tensor leaf: ``p`` (both sides), ``bound`` and
    ``total`` (``b`` and ``s``: the reference's; a candidate's are not sent)."""

    p: list[list[float]]
    bound: list[list[float]]
    total: list[list[float]]

    def reply(self, bounds: bool) -> dict:
        return {"projections": self.p, **({"bounds": self.bound, "totals": self.total} if bounds else {})}

    @classmethod
    def from_reply(cls, reply: dict, bounds: bool) -> "Projections":
        """Read from a rank's reply; ``ValueError`` where it is not a list of lists of numbers
        (and, with ``bounds``, of the same shape three times)."""
        p = _table(reply.get("projections"), "projections")
        if not bounds:
            return cls(p=p, bound=[[0.0] * len(row) for row in p], total=[[0.0] * len(row) for row in p])
        bound, total = _table(reply.get("bounds"), "bounds"), _table(reply.get("totals"), "totals")
        if [len(r) for r in bound] != [len(r) for r in p] or [len(r) for r in total] != [len(r) for r in p]:
            raise ValueError("projections, bounds and totals differ in shape")
        return cls(p=p, bound=bound, total=total)

    @property
    def shape(self) -> list[int]:
        return [len(row) for row in self.p]

    def finite(self) -> bool:
        return all(math.isfinite(x) for table in (self.p, self.bound, self.total) for row in table for x in row)


def _table(value: Any, name: str) -> list[list[float]]:
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        raise ValueError(f"{name}: expected a list of lists, got {type(value).__name__}")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for row in value for x in row):
        raise ValueError(f"{name}: expected numbers")
    return [[float(x) for x in row] for row in value]


@dataclass(frozen=True)
class Mismatch:
    """A call whose projection is off the reference's by more than allowed."""

    call: int
    leaf: int
    got: float
    want: float
    allowed: float

    @property
    def off(self) -> float:
        return abs(self.got - self.want)


def allowed(bound: float, total: float, sigmas: float) -> float:
    return sigmas * bound + ROUNDING * total + FLOOR


def first_mismatch(got: Projections, want: Projections, sigmas: float) -> Mismatch | None:
    """The first call and leaf whose candidate projection is not within ``sigmas`` bounds (plus
    rounding) of the reference's; NaN never is. Shapes must agree (``shape_problem``)."""
    for call, (row, ref_row, b_row, s_row) in enumerate(zip(got.p, want.p, want.bound, want.total)):
        for leaf, (p_c, p_r, b, s) in enumerate(zip(row, ref_row, b_row, s_row)):
            limit = allowed(b, s, sigmas)
            if not abs(p_c - p_r) <= limit:
                return Mismatch(call=call, leaf=leaf, got=p_c, want=p_r, allowed=limit)
    return None


def shape_problem(got: Projections, want: Projections) -> str:
    """Why the candidate's numbers cannot be compared with the reference's ("" when they can)."""
    if len(got.p) != len(want.p):
        return f"{len(got.p)} calls' projections for {len(want.p)} timed calls"
    for call, (a, b) in enumerate(zip(got.shape, want.shape)):
        if a != b:
            return f"timed call {call}: {a} projections for {b} tensor outputs"
    return ""


def warm(device: torch.device) -> None:
    """Compile the GPU projection before anything is timed (its first call compiles the kernel)."""
    if device.type == "cuda":
        project([torch.zeros(8, device=device)], seed=1)
