"""Random projections of every timed call's outputs, so that the judge checks each call cheaply.

Per timed call and tensor leaf, both sides compute in float64, in one pass over the elements,

- ``p = sum_j r_j w_j`` (linear) and ``p2 = sum_j r'_j w_j^2`` (quadratic), and
- the power sums ``s_k = sum_j |w_j|^k``, k = 1..4, from which the reference's bounds and
  rounding allowances come (``projection_check.py``: Hoeffding over the leaf's tolerance).

``r_j`` and ``r'_j`` (+-1) are the top two bits of one 32-bit hash of the block's projection seed
(drawn by the judge at random, per block), the call's index in the block, the leaf's position in
the flattened outputs and the element's row-major index ``j``: the same signs on either side,
whatever the tensors' strides or the chunks they are read in. The hash (``_mix``) is a bijection
of 32-bit words with full avalanche, so over the indices of a leaf its outputs pass for uniform
words, whose top two bits are independent fair bits: ``r'`` is as unrelated to ``r`` as either is
to the index (``test_projection``: no correlation between them, across lags, seeds or calls).

Why two projections. The candidate's process learns the signs (it projects its own outputs), so
it may compute the projections some cheaper way than the outputs and hand back anything. The
linear one is cheap where the operation is linear: for ``out = X W`` (m x k times k x n), ``p =
<R, X W> = <X, R W^T>``, and with signs fixed for a block ``R W^T`` is built once and each call
costs ``m k`` instead of ``m k n``; for a sum across ranks (an all-reduce) the projection of the
sum is the sum of each rank's projection, so the collective can be skipped. Hence the signs change
with every call (building ``R W^T`` is the product's cost, per call), and the quadratic projection:
``p2 = sum_i x_i^T (W diag(r'_i) W^T) x_i``, a quadratic form per row ``i`` whose k x k matrix
costs ``k^2 n`` to build (k times the row's product) and is new in every call; without it, the
squares need every ``x_i . w_j``, the product itself. Across ranks ``sum_j r'_j (a_j + b_j)^2``
holds the cross terms ``2 sum_j r'_j a_j b_j``, which need the partials in one place (the
collective's traffic). What no projection closes: an operation whose outputs are a cheap function
of few values (a broadcast, an elementwise map) can be fused with its projections, saving the
outputs' write (``docs/reliability.md``).

Elements are read in chunks of at most ``CHUNK`` (1M; each converted to float64, with its signs), so
no buffer of the outputs' full size is made (on a GPU one Triton kernel per piece hashes the
indices in registers instead: ``projection_kernel.py``); complex leaves are read as their real view, bool
and integer leaves as float64 (their tolerance is 0: exact). Non-tensor leaves are skipped.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

from .projection_check import LeafShape, Projections

#: Elements read at once: the scratch of a call's projection is a few float64 and int64 buffers
#: of this many elements (8 MiB each, about 40 MiB at most), outside the device-memory account
#: of either side.
CHUNK = 1 << 20
#: On a GPU: elements per kernel launch of a contiguous leaf (read in place), and per copied piece
#: of a strided one (the only scratch there, besides six float64 per 4096 elements).
GPU_PIECE = 1 << 26
GPU_COPY = 1 << 22
#: The tolerance of a floating dtype missing from the table (``compare.compare_leaf``'s).
FALLBACK_TOLERANCE = (1e-5, 1.3e-6)
#: A leaf's numbers, in this order: p, p2, s1, s2, s3, s4.
SUMS = 6

_MASK = 0xFFFFFFFF
# Odd multipliers below 2**31: a 32-bit value times one stays inside int64.
_M1, _M2 = 0x7FEB352D, 0x2C1B3C6D


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def _key(seed: int, leaf: int, high: int, call: int = 0) -> int:
    """A 32-bit key for the indices of ``leaf`` in call ``call`` whose upper 32 bits are ``high``."""
    return _splitmix64(_splitmix64(_splitmix64(_splitmix64(int(seed)) ^ int(call)) ^ int(leaf)) ^ int(high)) & _MASK


def _mix(x: torch.Tensor, tmp: torch.Tensor) -> torch.Tensor:
    """An avalanche of 32-bit values held in int64, in place (``tmp``: scratch of x's size)."""
    for shift, multiplier in ((16, _M1), (15, _M2), (16, _M1)):
        x.bitwise_xor_(torch.bitwise_right_shift(x, shift, out=tmp)).mul_(multiplier).bitwise_and_(_MASK)
    return x.bitwise_xor_(torch.bitwise_right_shift(x, 15, out=tmp))


def signs(seed: int, leaf: int, start: int, n: int, device: torch.device | str = "cpu", call: int = 0) -> torch.Tensor:
    """``r_j`` and ``r'_j`` (a 2 x n float64 tensor of +-1) for indices ``start`` .. ``start + n -
    1`` of ``leaf`` in call ``call``: bits 31 and 30 of the index's hash."""
    out = torch.empty(2, n, dtype=torch.float64, device=device)
    x = torch.empty(n, dtype=torch.int64, device=device)
    tmp = torch.empty(n, dtype=torch.int64, device=device)
    for done, size, first in _spans(start, n):
        low = first & _MASK
        piece = torch.arange(low, low + size, dtype=torch.int64, device=device, out=x[:size])
        piece.bitwise_xor_(_key(seed, leaf, first >> 32, call))
        _mix(piece, tmp[:size]).bitwise_right_shift_(30)  # the top two bits of the 32
        out[0, done:done + size].copy_(torch.bitwise_right_shift(piece, 1, out=tmp[:size])).mul_(-2.0).add_(1.0)
        out[1, done:done + size].copy_(piece.bitwise_and_(1)).mul_(-2.0).add_(1.0)
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
    """The sum of a leaf's per-piece numbers (``SUMS`` of them)."""
    if not parts:
        return torch.zeros(SUMS, dtype=torch.float64, device=device)
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


class Projector:
    """The projections of one block's timed calls: ``add`` after each call (device work only),
    ``finish`` once (one copy to the host). The signs change with each call (its index in the
    block), so nothing a candidate builds from them serves a second call."""

    def __init__(self, seed: int, device: torch.device | str, tolerance: dict[torch.dtype, tuple[float, float]] | None = None,
                 chunk: int = CHUNK):
        self.seed, self.device, self.tolerance = int(seed), torch.device(device), tolerance
        self.chunk = max(1, int(chunk))
        self._calls: list[torch.Tensor] = []  # per call: (leaves, SUMS) float64 on the device
        self._shapes: list[list[LeafShape]] = []

    def leaf(self, position: int, t: torch.Tensor, call: int = 0) -> torch.Tensor:
        """(p, p2, s1, s2, s3, s4) of one tensor leaf in call ``call``, float64 on its device."""
        t = t.detach()
        if t.is_cuda and self.device.type == "cuda":
            return self._leaf_on_gpu(position, t, call)
        parts = []
        for start, x in _real_chunks(t, self.chunk, self.device):
            r = signs(self.seed, position, start, x.numel(), self.device, call)
            a, x2 = x.abs(), x * x
            parts.append(torch.stack([torch.dot(r[0], x), torch.dot(r[1], x2), a.sum(), x2.sum(), torch.dot(a, x2),
                                      torch.dot(x2, x2)]))
        return _total(parts, self.device)

    def _leaf_on_gpu(self, position: int, t: torch.Tensor, call: int) -> torch.Tensor:
        """``leaf`` by one Triton kernel per piece (``projection_kernel``): the same numbers, with
        no sign or float64 buffers (a contiguous leaf is read in place)."""
        from .projection_kernel import project_piece  # optional: triton (CPU installs may lack it); projection_kernel imports this module too

        if t.is_complex():
            t = torch.view_as_real(t.resolve_conj().resolve_neg())
        parts = []
        for start, piece in _chunks(t, GPU_PIECE if t.is_contiguous() else GPU_COPY):
            for done, size, first in _spans(start, piece.numel()):
                key = _key(self.seed, position, first >> 32, call)
                parts.append(project_piece(piece[done:done + size], first & _MASK, key))
        return _total(parts, t.device)

    def add(self, leaves: list[Any]) -> None:
        """One call's flattened outputs."""
        call = len(self._calls)
        rows, shapes = [], []
        for position, leaf in enumerate(leaves):
            if not isinstance(leaf, torch.Tensor):
                continue
            rows.append(self.leaf(position, leaf, call))
            shapes.append(LeafShape(leaf.numel(), leaf.is_complex(), *leaf_tolerance(leaf, self.tolerance)))
        self._calls.append(torch.stack(rows) if rows else torch.zeros(0, SUMS, dtype=torch.float64, device=self.device))
        self._shapes.append(shapes)

    def finish(self) -> Projections:
        """Every call's numbers, moved to the host at once."""
        flat = torch.cat([c.reshape(-1) for c in self._calls]).cpu().tolist() if self._calls else []
        tables: dict[str, list[list[float]]] = {name: [] for name in ("p", "p2", "bound", "bound2", "total", "total2")}
        at = 0
        for shapes in self._shapes:
            rows = [flat[at + SUMS * i:at + SUMS * (i + 1)] for i in range(len(shapes))]
            at += SUMS * len(shapes)
            tables["p"].append([row[0] for row in rows])
            tables["p2"].append([row[1] for row in rows])
            tables["total"].append([row[2] for row in rows])
            tables["total2"].append([row[3] for row in rows])
            tables["bound"].append([shape.bound(*row[2:4]) for shape, row in zip(shapes, rows)])
            tables["bound2"].append([shape.square_bound(*row[2:6]) for shape, row in zip(shapes, rows)])
        self._calls, self._shapes = [], []
        return Projections(**tables)


def project(leaves: list[Any], seed: int, tolerance: dict[torch.dtype, tuple[float, float]] | None = None,
            chunk: int = CHUNK) -> Projections:
    """One call's projections (a block of one call: call 0's signs)."""
    devices = [x.device for x in leaves if isinstance(x, torch.Tensor)]
    projector = Projector(seed, devices[0] if devices else "cpu", tolerance, chunk)
    projector.add(leaves)
    return projector.finish()


#: The dtypes whose GPU projection is compiled before anything is timed (others compile on first use).
WARM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def warm(device: torch.device) -> None:
    """Compile the GPU projection before anything is timed (its first call for a dtype compiles
    the kernel for it)."""
    if device.type == "cuda":
        project([torch.zeros(8, device=device, dtype=dtype) for dtype in WARM_DTYPES], seed=1)
