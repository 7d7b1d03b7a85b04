"""The flag protocol every comm kernel speaks, as Triton device functions.

A producer makes its stores visible, then writes the call's epoch into a flag with release
semantics at system scope (``signal``); a consumer polls the flag until it holds at least that
epoch and then acquires it (``wait``), after which the producer's stores are visible to every
thread of the consumer's program. Both sides put a CTA barrier next to the flag operation: the
flag is written or read by one thread, and the barrier orders the other threads' stores before
the release and their loads after the acquire (release and acquire are cumulative through it).

``wait`` gives up after ``max_spins`` polls and adds one to a status word instead of hanging for
good, so a peer that never arrives turns into an error the host can read (``Peers.check``), and
Triton's interpreter, which runs programs one after another, can test which flags a tile waits on.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: Launch arguments that change on every call (the flag epoch, the half of a double buffer in
#: use). Triton specialises an integer argument on its value (equal to 1, a multiple of 16) and
#: compiles a new variant the first time one shows up: epoch 16 would compile in the middle of a
#: timed run, and every launch would key on them. Every launched comm kernel declares them.
PER_CALL = ["epoch", "parity_offset", "w_parity_offset"]


@triton.jit
def signal(flag_ptr, epoch):
    """Release this program's earlier stores, then publish ``epoch`` at ``flag_ptr`` (any rank's)."""
    tl.debug_barrier()
    tl.atomic_xchg(flag_ptr, epoch, sem="release", scope="sys")


@triton.jit
def wait(flag_ptr, epoch, max_spins, status_ptr):
    """Poll the flag at ``flag_ptr`` until it is at least ``epoch``, then acquire it. Returns
    whether it got there; after ``max_spins`` polls it counts a timeout in ``status_ptr`` instead."""
    seen = tl.load(flag_ptr, volatile=True)
    spins = 0
    while (seen < epoch) & (spins < max_spins):
        seen = tl.load(flag_ptr, volatile=True)
        spins += 1
    ok = seen >= epoch
    if ok:
        # The polls were relaxed; this read-modify-write (of nothing) is the acquire.
        tl.atomic_add(flag_ptr, 0, sem="acquire", scope="sys")
    else:
        tl.atomic_add(status_ptr, 1)
    tl.debug_barrier()
    return ok


@triton.jit(do_not_specialize=PER_CALL)
def _signal_kernel(flag_ptr, index, epoch):
    signal(flag_ptr + index, epoch)


@triton.jit(do_not_specialize=PER_CALL)
def _wait_kernel(flag_ptr, first, count, epoch, max_spins, status_ptr):
    for i in range(first, first + count):
        wait(flag_ptr + i, epoch, max_spins, status_ptr)


def signal_flag(flags: torch.Tensor, index: int, epoch: int) -> None:
    """On the current stream, after everything before it: publish ``epoch`` in ``flags[index]``
    (a flag array of any rank). Follows copy-engine transfers into that rank's buffers."""
    _signal_kernel[(1,)](flags, index, epoch, num_warps=1)


def wait_flags(flags: torch.Tensor, first: int, count: int, epoch: int, max_spins: int, status: torch.Tensor) -> None:
    """On the current stream: wait until ``flags[first:first + count]`` (this rank's) all hold
    at least ``epoch``; what follows on the stream then sees what their producers stored."""
    _wait_kernel[(1,)](flags, first, count, epoch, max_spins, status, num_warps=1)
