"""The ring-attention KV exchange overlapped with the block attention: every rank pushes its K and V
blocks (or whatever tensors a ring passes on) into a slot of each rank that needs them, with the copy engines on a side stream, nearest
first (rank+1 attends to it first), and flags each slot; the attention loop waits, on its own
stream, only for the slot of the block it is about to attend to (``KVExchange.block``). The
transfers use no SMs, so they run under the attention kernels instead of between them, and no
step waits for a neighbour's previous step as a ring of point-to-point exchanges does.

``ring_attention`` is the forward of ring attention written with it: the online-softmax merge of
the block results is the same as the references' (log-sum-exp in float32); ``attend`` is the
caller's block attention returning (out, lse).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .peers import NO_TIMEOUT, Peers, side_stream
from .signal import signal_flag, wait_flags


def buffer_numel(world: int, *blocks: torch.Tensor) -> int:
    return world * sum(t.numel() for t in blocks)


def supported(*blocks: torch.Tensor) -> bool:
    first = blocks[0]
    return all(t.dtype == first.dtype and t.device == first.device and t.is_contiguous() and t.numel() > 0 for t in blocks)


@dataclass
class KVExchange:
    """One call's exchange: this rank's blocks (K and V, or any tensors a ring passes on) pushed to
    the ranks that need them; ``block(s)`` returns rank s's once they have arrived (views of this
    rank's slots)."""

    blocks: tuple[torch.Tensor, ...]
    peers: Peers
    epoch: int
    max_spins: int

    def _slot(self, rank: int, source: int) -> tuple[torch.Tensor, ...]:
        buf = self.peers.buffer(rank, self.epoch % 2)
        start = source * sum(t.numel() for t in self.blocks)
        views = []
        for t in self.blocks:
            views.append(buf[start : start + t.numel()].view_as(t))
            start += t.numel()
        return tuple(views)

    def _send(self, dest: int) -> None:
        for slot, t in zip(self._slot(dest, self.peers.rank), self.blocks):
            slot.copy_(t, non_blocking=True)
        signal_flag(self.peers.peer_flags[dest], self.peers.rank, self.epoch)

    def push(self, dests: list[int]) -> None:
        """Copy this rank's blocks into slot ``rank`` of each of ``dests`` (in that order), each
        followed by its flag; on the side stream on CUDA, after everything before it."""
        device = self.blocks[0].device
        if device.type != "cuda":
            for dest in dests:
                self._send(dest)
            return
        stream = side_stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for dest in dests:
                self._send(dest)
        for t in self.blocks:
            t.record_stream(stream)

    def block(self, source: int) -> tuple[torch.Tensor, ...]:
        """Rank ``source``'s blocks: this rank's own, or its slot once flagged (the current stream
        waits for the flag; nothing else does)."""
        if source == self.peers.rank:
            return self.blocks
        wait_flags(self.peers.flags, source, 1, self.epoch, self.max_spins, self.peers.status)
        return self._slot(self.peers.rank, source)

    def finish(self) -> None:
        """The call ends when its pushes have (a caller timing it sees all of its work)."""
        if self.blocks[0].is_cuda:
            torch.cuda.current_stream(self.blocks[0].device).wait_stream(side_stream(self.blocks[0].device))


def exchange(blocks: tuple[torch.Tensor, ...], peers: Peers, dests: list[int], *, max_spins: int = NO_TIMEOUT, epoch: int | None = None) -> KVExchange:
    """Start this call's exchange: push ``blocks`` to ``dests`` and return the handle to wait on
    other ranks' blocks with. ``epoch`` serves simulated ranks (tests)."""
    if not blocks or not supported(*blocks) or peers.numel < buffer_numel(peers.world, *blocks) or peers.data.dtype != blocks[0].dtype or peers.n_flags < peers.world:
        raise ValueError("the exchange needs contiguous blocks of one dtype and peers' buffers of that dtype holding world sets of them")
    if epoch is None:
        epoch = peers.next_epoch()
    handle = KVExchange(tuple(blocks), peers, epoch, max_spins)
    handle.push(dests)
    return handle


def ring_order(rank: int, world: int, causal: bool) -> tuple[list[int], list[int]]:
    """(the ranks to push this rank's block to, nearest first; the sources this rank attends to,
    in ring order). Causal over contiguous shards: only later ranks need an earlier block."""
    dests = [(rank + step) % world for step in range(1, world)]
    sources = [(rank - step) % world for step in range(world)]
    if causal:
        dests = [d for d in dests if d > rank]
        sources = [s for s in sources if s <= rank]
    return dests, sources


def ring_attention(
    q: torch.Tensor,
    handle: KVExchange,
    sources: list[int],
    attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], tuple[torch.Tensor, torch.Tensor]],
    causal: bool,
) -> torch.Tensor:
    """Attention of ``q`` over the blocks of ``sources`` (own first), merged by log-sum-exp."""
    out = lse = None
    for source in sources:
        k, v = handle.block(source)[:2]
        block_out, block_lse = attend(q, k, v, causal and source == handle.peers.rank)
        if out is None:
            out, lse = block_out.float(), block_lse
            continue
        merged = torch.logaddexp(lse, block_lse)
        out = out * torch.exp(lse - merged).unsqueeze(-1) + block_out.float() * torch.exp(block_lse - merged).unsqueeze(-1)
        lse = merged
    handle.finish()
    return out.to(q.dtype)
