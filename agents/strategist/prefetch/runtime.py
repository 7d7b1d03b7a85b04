"""What a candidate whose loop-carried exchanges were prefetched runs (``_KloomPrefetch``): the next
iteration's exchange issued on a side stream while this one computes.

This module is the runtime's only copy: tests import it, and ``agents.strategist.embed.runtime_source``
copies its code (all but this docstring) into each candidate, which can import no kloom module.
"""

import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree

#: The side stream of each device that prefetched exchanges run on, in the order they are issued.
_kl_prefetch_streams = {}


class _KloomPrefetch:
    """A loop-carried exchange ``state = fn(*state)`` issued one iteration early.

    ``ahead(iterable)`` runs the loop one element ahead: while the body runs, ``more`` says whether
    another iteration follows and ``upcoming`` is its loop value. ``start(fn, *state)`` issues the
    next iteration's exchange (on CUDA on a side stream, else at once); ``take(fn, *state)`` returns
    its result, or runs the exchange in place when none was started (the first exchange)."""

    def __init__(self):
        self.more = False
        self.upcoming = None
        self._pending = None

    def ahead(self, iterable):
        items = iter(iterable)
        for current in items:
            for following in items:
                self.more, self.upcoming = True, following
                break
            else:
                self.more, self.upcoming = False, None
            yield current
            while self.more:
                current = self.upcoming
                for following in items:
                    self.upcoming = following
                    break
                else:
                    self.more, self.upcoming = False, None
                yield current
            return

    def start(self, fn, *args):
        if self._pending is not None:
            raise RuntimeError("kloom prefetch: an exchange was issued twice for one iteration")
        tensors = [t for t in _kl_pytree.tree_leaves(args) if isinstance(t, _kl_torch.Tensor)]
        if not tensors or not all(t.is_cuda for t in tensors) or _kl_torch.compiler.is_compiling():
            # No stream to overlap on: exchange now, synchronously.
            self._pending = (args, fn(*args), None)
            return
        device = tensors[0].device
        side = _kl_prefetch_streams.get(device)
        if side is None:
            side = _kl_prefetch_streams[device] = _kl_torch.cuda.Stream(device=device)
        # Send finished data: the side stream waits for everything the compute stream has queued.
        side.wait_stream(_kl_torch.cuda.current_stream(device))
        with _kl_torch.cuda.stream(side):
            out = fn(*args)
        for t in tensors:
            t.record_stream(side)  # the compute stream may drop them while the side stream sends
        self._pending = (args, out, side)

    def take(self, fn, *args):
        if self._pending is None:
            return fn(*args)
        started, out, side = self._pending
        self._pending = None
        if len(started) != len(args) or any(a is not b for a, b in zip(started, args)):
            raise RuntimeError("kloom prefetch: the state changed after its exchange was issued")
        if side is not None:
            current = _kl_torch.cuda.current_stream(side.device)
            current.wait_stream(side)
            for t in _kl_pytree.tree_leaves(out):
                if isinstance(t, _kl_torch.Tensor) and t.is_cuda:
                    t.record_stream(current)  # allocated on the side stream, used on this one
        return out
