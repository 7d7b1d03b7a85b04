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

Small leaves (under ``KERNEL_MIN_BYTES``) are copied as their call returns and a block's calls
projected together at its end (``_Stage``): a dozen tensor operations per call cost the judge
~0.2 ms a call, most of an honest small call's time outside its clock, and on a GPU the kernel's
first use costs 0.5 s in each new candidate process. The copy and the projection both happen
after the call, outside the side's clock and inside the judge's, as before. Elements are read in
chunks of at most ``CHUNK`` (1M; each converted to float64, with its signs), so no buffer of the
outputs' full size is made (on a GPU, leaves from ``KERNEL_MIN_BYTES`` up go through one Triton
kernel per piece, which hashes the indices in registers: ``projection_kernel.py``; a leaf stored
densely in another order of its dimensions, channels-last say, is read in memory order, each
element's row-major index decoded from its offset, so its layout costs the judge no more than a
contiguous one: ``project_dense``); complex leaves
are read as their real view, bool and integer leaves as float64 (their tolerance is 0: exact).
Non-tensor leaves are skipped.
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
#: Leaves smaller than this are staged and projected once per block (``Projector``), while a
#: block's staging stays within ``STAGE_BYTES``; on a GPU, leaves from this size up are projected
#: by the Triton kernel as their call returns.
KERNEL_MIN_BYTES = 1 << 20
STAGE_BYTES = 8 << 20
#: On a GPU, elements the tensor operations read at once (staged blocks, small leaves past the
#: staging budget): their float64 and int64 temporaries, ~2 MiB each, stay near 20 MiB in all
#: beside the staging (the device's memory is what the evaluator's peak measures).
GPU_CHUNK = 1 << 18
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
        # A copy even where the slice is one strided row, which reshape would return as a
        # view with a stride: the GPU kernel reads a piece as contiguous (a channels-last
        # output's last row of a chunk was read across other elements; honest candidates judged
        # incorrect on an H100, thirty-fifth session).
        yield offset + i * inner, t[i:i + rows].reshape(-1).contiguous()


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


class _Stage:
    """One output position's leaves of a block, copied as each call returns and projected
    together at the block's end: a few tensor operations over every call's elements instead of a
    kernel launch (or a dozen operations) per call. Rows hold each leaf's real view, flat, in
    row-major order; ``calls`` the call each row came from."""

    def __init__(self, like: torch.Tensor, capacity: int, device: torch.device):
        self.dtype, self.numel = like.dtype, like.numel()
        self.rows = torch.empty(capacity, self.numel, dtype=like.dtype, device=device)
        self.calls: list[int] = []

    @property
    def nbytes(self) -> int:
        return self.rows.numel() * self.rows.element_size()

    def take(self, real: torch.Tensor, call: int) -> bool:
        """Copy ``real`` in as the next row (False, and nothing copied, where it does not fit)."""
        if real.dtype != self.dtype or real.numel() != self.numel or len(self.calls) == self.rows.shape[0]:
            return False
        self.rows[len(self.calls)].view(real.shape).copy_(real)
        self.calls.append(call)
        return True

    def numbers(self, seed: int, position: int, chunk: int) -> torch.Tensor:
        """(calls, SUMS) float64: ``Projector.leaf``'s numbers for every row, each with its call's
        signs, read in pieces of about ``chunk`` elements."""
        out, n = [], self.numel
        step = max(1, chunk // max(1, n))
        index = torch.arange(n, dtype=torch.int64, device=self.rows.device)
        for first in range(0, len(self.calls), step):
            calls = self.calls[first:first + step]
            keys = torch.tensor([_key(seed, position, 0, c) for c in calls], dtype=torch.int64, device=self.rows.device)
            w = self.rows[first:first + len(calls)].to(torch.float64)
            h = index.unsqueeze(0) ^ keys.unsqueeze(1)  # the indices' hashes (n < 2**32: their upper bits are 0)
            _mix(h, torch.empty_like(h)).bitwise_right_shift_(30)
            r = 1.0 - 2.0 * torch.bitwise_right_shift(h, 1).to(torch.float64)
            r2 = 1.0 - 2.0 * h.bitwise_and_(1).to(torch.float64)
            a, w2 = w.abs(), w * w
            out.append(torch.stack([(r * w).sum(1), (r2 * w2).sum(1), a.sum(1), w2.sum(1), (a * w2).sum(1), (w2 * w2).sum(1)], 1))
        return torch.cat(out) if out else torch.zeros(0, SUMS, dtype=torch.float64, device=self.rows.device)


def _real_view(t: torch.Tensor) -> torch.Tensor:
    """A leaf's real elements: a complex one as its real view (element ``k`` is ``2k`` and ``2k + 1``)."""
    t = t.detach()
    return torch.view_as_real(t.resolve_conj().resolve_neg()) if t.is_complex() else t


class Projector:
    """The projections of one block's timed calls: ``add`` after each call (device work only),
    ``finish`` once (one copy to the host per staged position, one for the rest). The signs change
    with each call (its index in the block), so nothing a candidate builds from them serves a
    second call.

    A leaf under ``KERNEL_MIN_BYTES`` is staged (``_Stage``: copied, and projected with the
    block's other calls at ``finish``) while the block's staging stays within ``STAGE_BYTES``
    for its ``calls``; other leaves are projected as their call returns (on a GPU, from
    ``KERNEL_MIN_BYTES`` up, by ``projection_kernel``). Either way the numbers are the same sums."""

    def __init__(self, seed: int, device: torch.device | str, tolerance: dict[torch.dtype, tuple[float, float]] | None = None,
                 chunk: int = CHUNK, calls: int = 1):
        self.seed, self.device, self.tolerance = int(seed), torch.device(device), tolerance
        self.chunk = max(1, min(int(chunk), GPU_CHUNK) if self.device.type == "cuda" else int(chunk))
        self.capacity = max(1, int(calls))
        # per call, per tensor leaf: its numbers (a float64 (SUMS,) tensor) or the position it was staged under
        self._calls: list[list[torch.Tensor | int]] = []
        self._shapes: list[list[LeafShape]] = []
        self._stages: dict[int, _Stage] = {}
        self._staged_bytes = 0

    def leaf(self, position: int, t: torch.Tensor, call: int = 0) -> torch.Tensor:
        """(p, p2, s1, s2, s3, s4) of one tensor leaf in call ``call``, float64 on its device."""
        t = t.detach()
        if t.is_cuda and self.device.type == "cuda" and _real_view(t).numel() * t.element_size() >= KERNEL_MIN_BYTES:
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
        from .projection_kernel import dense_layout, project_dense, project_piece  # optional: triton (CPU installs may lack it); projection_kernel imports this module too

        t = _real_view(t)
        if not t.is_contiguous():
            layout = dense_layout(t)
            if layout is not None:  # read in memory order, not gathered in row-major pieces
                return project_dense(t, layout, _key(self.seed, position, 0, call))
        parts = []
        for start, piece in _chunks(t, GPU_PIECE if t.is_contiguous() else GPU_COPY):
            for done, size, first in _spans(start, piece.numel()):
                key = _key(self.seed, position, first >> 32, call)
                parts.append(project_piece(piece[done:done + size], first & _MASK, key))
        return _total(parts, t.device)

    def _stage(self, position: int, leaf: torch.Tensor, call: int) -> bool:
        """Stage ``leaf`` (True) where it is small and its position's staging fits the budget."""
        real = _real_view(leaf)
        stage = self._stages.get(position)
        if stage is None:
            if real.numel() * real.element_size() >= KERNEL_MIN_BYTES:
                return False
            stage = _Stage(real, self.capacity, self.device)
            if self._staged_bytes + stage.nbytes > STAGE_BYTES:
                return False
            self._stages[position] = stage
            self._staged_bytes += stage.nbytes
        return stage.take(real, call)

    def add(self, leaves: list[Any]) -> None:
        """One call's flattened outputs."""
        call = len(self._calls)
        rows: list[torch.Tensor | int] = []
        shapes = []
        for position, leaf in enumerate(leaves):
            if not isinstance(leaf, torch.Tensor):
                continue
            rows.append(position if self._stage(position, leaf, call) else self.leaf(position, leaf, call))
            shapes.append(LeafShape(leaf.numel(), leaf.is_complex(), *leaf_tolerance(leaf, self.tolerance)))
        self._calls.append(rows)
        self._shapes.append(shapes)

    def finish(self) -> Projections:
        """Every call's numbers, moved to the host."""
        staged = {position: (stage.numbers(self.seed, position, self.chunk).cpu().tolist(), {c: i for i, c in enumerate(stage.calls)})
                  for position, stage in self._stages.items()}
        alone = [row for rows in self._calls for row in rows if not isinstance(row, int)]
        alone_numbers = iter(torch.stack(alone).cpu().tolist() if alone else [])
        tables: dict[str, list[list[float]]] = {name: [] for name in ("p", "p2", "bound", "bound2", "total", "total2")}
        for call, (rows, shapes) in enumerate(zip(self._calls, self._shapes)):
            numbers = [staged[row][0][staged[row][1][call]] if isinstance(row, int) else next(alone_numbers) for row in rows]
            tables["p"].append([row[0] for row in numbers])
            tables["p2"].append([row[1] for row in numbers])
            tables["total"].append([row[2] for row in numbers])
            tables["total2"].append([row[3] for row in numbers])
            tables["bound"].append([shape.bound(*row[2:4]) for shape, row in zip(shapes, numbers)])
            tables["bound2"].append([shape.square_bound(*row[2:6]) for shape, row in zip(shapes, numbers)])
        self._calls, self._shapes, self._stages, self._staged_bytes = [], [], {}, 0
        return Projections(**tables)


def project(leaves: list[Any], seed: int, tolerance: dict[torch.dtype, tuple[float, float]] | None = None,
            chunk: int = CHUNK) -> Projections:
    """One call's projections (a block of one call: call 0's signs)."""
    devices = [x.device for x in leaves if isinstance(x, torch.Tensor)]
    projector = Projector(seed, devices[0] if devices else "cpu", tolerance, chunk)
    projector.add(leaves)
    return projector.finish()


def kernel_dtypes(outputs: list[tuple[int, str]]) -> set[torch.dtype]:
    """The dtypes the GPU kernel will read for ``outputs`` (bytes, dtype name: a trial's tensor
    leaves): those of leaves of at least ``KERNEL_MIN_BYTES``, complex ones as their real parts."""
    found = set()
    for size, name in outputs:
        dtype = getattr(torch, str(name).removeprefix("torch."), None)
        if int(size) >= KERNEL_MIN_BYTES and isinstance(dtype, torch.dtype):
            found.add(dtype.to_real() if dtype.is_complex else dtype)
    return found


def warm(device: torch.device, outputs: list[tuple[int, str]]) -> None:
    """Compile the GPU projection kernels (row-major and memory-order) before anything is timed, for the dtypes ``outputs``
    will use it for (``kernel_dtypes``; its first call for a dtype compiles or loads it: 0.5 s for
    three dtypes in a new process on an H200). Smaller outputs never reach it."""
    dtypes = kernel_dtypes(outputs) if device.type == "cuda" else set()
    if dtypes:
        from .projection_kernel import dense_layout, project_dense, project_piece  # optional: triton

        for dtype in dtypes:
            project_piece(torch.zeros(8, device=device, dtype=dtype), 0, 1)
            # The kernel for leaves stored in another order (a candidate's channels-last output).
            other = torch.zeros(2, 4, device=device, dtype=dtype).t()
            project_dense(other, dense_layout(other), 1)
