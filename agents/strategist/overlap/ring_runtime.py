"""What a candidate of the ``overlap`` strategy runs for a ring loop (``ring.py``), inlined with
``runtime.py``: the ring's exchanges served by ``kernels/comm/ring_kv``."""

import torch
import torch.distributed as dist

from kernels.comm import ring_kv

from .runtime import _KL_OVERLAP, _KL_OVERLAP_FORCE, _not_taken, _peers


class _KloomRing:
    """The exchanges of one call of a ring loop whose exchange ``fn`` shifts its state one rank
    along the ring (``ring.py`` checked that from the source). The first ``take`` pushes this
    rank's state to every peer with the copy engines; the j-th returns rank (rank - j)'s state as
    soon as it has arrived. Outside the kernel's envelope every take calls ``fn`` itself."""

    def __init__(self):
        self.handle = None
        self.plain = False
        self.taken = 0
        self.last = None

    def take(self, fn, *state):
        if self.plain:
            return fn(*state)
        world = dist.get_world_size() if dist.is_initialized() else 1
        if self.handle is None:
            tensors = [t for t in state if isinstance(t, torch.Tensor)]
            eligible = (
                len(tensors) == len(state) and _eligible_any_dtype(tensors) and ring_kv.supported(*tensors)
                and _KL_OVERLAP_FORCE in (None, "ring")
            )  # fmt: skip
            if not eligible:
                self.plain = True
                _not_taken(state[0] if state else None)
                return fn(*state)
            rank = dist.get_rank()
            numel = ring_kv.buffer_numel(world, *tensors)
            peers = _peers(("ring", tuple(tuple(t.shape) for t in tensors), tensors[0].dtype), numel, world, tensors[0].dtype)
            self.handle = ring_kv.exchange(tuple(tensors), peers, [(rank + step) % world for step in range(1, world)])
        elif len(state) != len(self.last) or any(a is not b for a, b in zip(state, self.last)):
            raise RuntimeError("kloom ring: the state passed on is not the one the previous exchange returned")
        self.taken += 1
        out = self.handle.block((dist.get_rank() - self.taken) % world)
        if self.taken % world == world - 1:
            self.handle.finish()  # a whole ring: the call's pushes are done when it is
        self.last = out
        _KL_OVERLAP["ring"] += 1
        return out if len(out) > 1 else out[0]


def _eligible_any_dtype(tensors) -> bool:
    """``_eligible`` for tensors that are only copied (any dtype)."""
    if not tensors or _KL_OVERLAP["broken"] is not None or torch.compiler.is_compiling():
        return False
    first = tensors[0]
    if not all(t.is_cuda and t.device == first.device and t.dtype == first.dtype for t in tensors):
        return False
    return dist.is_initialized() and dist.get_world_size() > 1 and not torch.cuda.is_current_stream_capturing()
