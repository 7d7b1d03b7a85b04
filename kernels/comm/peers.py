"""The memory a comm kernel shares with its peers: a data buffer and a flag array on every rank,
allocated alike, and where each rank's copy of them lives.

Two ways to make them, one record for both (``Peers``):

- ``symmetric_peers``: torch symmetric memory. ``symm_mem.empty`` allocates on every rank and
  ``rendezvous`` maps each peer's allocation into this process (NVLink peer-to-peer; NVLink
  multicast is never asked for). A kernel stores to a peer's buffer through its address.
- ``emulated_peers``: ``world`` simulated ranks in one process. Every rank's buffer is a slice of
  one tensor, so a kernel launched once per simulated rank (Triton's interpreter on CPU tensors)
  reads and writes its "peers" exactly as it would across GPUs.

Flags are epoch numbers, never reset: a call takes the next epoch (``next_epoch``), producers
write it with release semantics and consumers wait until a flag is at least it. A flag left from
an earlier call is always smaller, so nothing has to be cleared between calls, and a rank that is
slow only makes its peers wait longer. Data buffers are double-buffered by the epoch's parity: a
rank that starts call e+1 has received every peer's data of call e, so every peer has finished
call e-1, the last reader of that parity's buffer.

Flags live in their own symmetric int32 allocation rather than in the data buffer's signal pad:
the pad's size is fixed at the first allocation of the process and torch's own symmetric-memory
ops use its slots, while a kernel here needs as many flags as it has tiles.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

#: Spins before a flag wait gives up and counts a timeout (``Peers.status``) instead of hanging
#: for good: on GPUs a poll takes well under a microsecond, so this is minutes.
NO_TIMEOUT = (1 << 31) - 1


@dataclass
class Peers:
    """One rank's view of the shared buffers: its own copies and every rank's addresses."""

    rank: int
    world: int
    data: torch.Tensor  # (2, numel): this rank's data buffer, one half per epoch parity
    flags: torch.Tensor  # (n_flags,) int32: this rank's flags, written by its peers
    status: torch.Tensor  # (1,) int32: flag waits that timed out on this rank
    data_ptrs: torch.Tensor  # (world,) int64: every rank's data buffer, as this process addresses it
    flag_ptrs: torch.Tensor  # (world,) int64: every rank's flag array
    peer_data: list[torch.Tensor]  # every rank's data buffer as a tensor (for copy-engine transfers)
    peer_flags: list[torch.Tensor]  # every rank's flag array as a tensor
    epoch: int = 0
    keep: list = field(default_factory=list, repr=False)  # rendezvous handles that must outlive the buffers
    _halves: dict = field(default_factory=dict, repr=False)  # (rank, parity) -> that buffer half's view

    @property
    def numel(self) -> int:
        return self.data.shape[1]

    @property
    def n_flags(self) -> int:
        return self.flags.numel()

    def next_epoch(self) -> int:
        """The epoch of a new call (1, 2, ...): every rank calls this once per call, in step."""
        self.epoch += 1
        if self.epoch >= NO_TIMEOUT:
            raise RuntimeError("flag epochs exhausted: rebuild the peers")
        return self.epoch

    @property
    def parity(self) -> int:
        return self.epoch % 2

    def buffer(self, rank: int | None = None, parity: int | None = None) -> torch.Tensor:
        """The data buffer half of ``parity`` (the current one by default) of ``rank`` (this one)."""
        rank = self.rank if rank is None else rank
        parity = self.parity if parity is None else parity
        half = self._halves.get((rank, parity))
        if half is None:  # a view made once: a call's host time is what latency-bound kernels pay
            half = self._halves[(rank, parity)] = self.peer_data[rank][parity]
        return half

    def check(self) -> None:
        """Raise if a flag wait on this rank timed out (its results are not to be trusted)."""
        timeouts = int(self.status.item())
        if timeouts:
            raise RuntimeError(f"rank {self.rank}: {timeouts} flag wait(s) timed out; a peer never signalled")


def emulated_peers(world: int, numel: int, dtype: torch.dtype, n_flags: int, device: str | torch.device = "cpu") -> list[Peers]:
    """``world`` simulated ranks in one process, their buffers slices of one tensor each."""
    if world < 1 or numel < 1 or n_flags < 1:
        raise ValueError(f"need world, numel and n_flags >= 1, got {world}, {numel}, {n_flags}")
    data = torch.zeros(world, 2, numel, dtype=dtype, device=device)
    flags = torch.zeros(world, n_flags, dtype=torch.int32, device=device)
    data_ptrs = torch.tensor([data[r].data_ptr() for r in range(world)], dtype=torch.int64, device=device)
    flag_ptrs = torch.tensor([flags[r].data_ptr() for r in range(world)], dtype=torch.int64, device=device)
    return [
        Peers(
            rank=r,
            world=world,
            data=data[r],
            flags=flags[r],
            status=torch.zeros(1, dtype=torch.int32, device=device),
            data_ptrs=data_ptrs,
            flag_ptrs=flag_ptrs,
            peer_data=[data[p] for p in range(world)],
            peer_flags=[flags[p] for p in range(world)],
            keep=[data, flags],
        )
        for r in range(world)
    ]


def symmetric_peers(numel: int, dtype: torch.dtype, n_flags: int, group=None) -> Peers:
    """This rank's ``Peers`` over torch symmetric memory on the current CUDA device. Collective:
    every rank of ``group`` (the default group when None) calls it with the same arguments."""
    import torch.distributed._symmetric_memory as symm_mem  # optional: a private torch API, missing from some builds; GPU runs only

    group = group if group is not None else dist.group.WORLD
    name = group.group_name
    if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed by older torch, deprecated later
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            symm_mem.enable_symm_mem_for_group(name)
    device = torch.device("cuda", torch.cuda.current_device())
    data = symm_mem.empty(2 * numel, dtype=dtype, device=device)
    flags = symm_mem.empty(n_flags, dtype=torch.int32, device=device)
    flags.zero_()
    data_handle = symm_mem.rendezvous(data, name)
    flag_handle = symm_mem.rendezvous(flags, name)
    world, rank = data_handle.world_size, data_handle.rank
    peer_data = [data_handle.get_buffer(p, (2, numel), dtype) for p in range(world)]
    peer_flags = [flag_handle.get_buffer(p, (n_flags,), torch.int32) for p in range(world)]
    # Every rank's flags are zero before any rank's first signal can land.
    torch.cuda.synchronize(device)
    dist.barrier(group=group)
    return Peers(
        rank=rank,
        world=world,
        data=data.view(2, numel),
        flags=flags,
        status=torch.zeros(1, dtype=torch.int32, device=device),
        data_ptrs=torch.tensor(list(data_handle.buffer_ptrs), dtype=torch.int64, device=device),
        flag_ptrs=torch.tensor(list(flag_handle.buffer_ptrs), dtype=torch.int64, device=device),
        peer_data=peer_data,
        peer_flags=peer_flags,
        keep=[data_handle, flag_handle],
    )


_SIDE_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


def side_stream(device: torch.device) -> torch.cuda.Stream:
    """The stream this process's copy-engine transfers use on ``device`` (made once). High
    priority: the one-program kernels that flag a finished transfer get the next free SM, ahead
    of the waiting kernels' blocks."""
    if device not in _SIDE_STREAMS:
        _SIDE_STREAMS[device] = torch.cuda.Stream(device=device, priority=-1)
    return _SIDE_STREAMS[device]


def resident_programs(device: torch.device, reserve: int = 0) -> int:
    """How many programs a kernel whose programs may spin should launch at most on ``device``:
    one per SM, less ``reserve`` SMs left for other kernels it waits on (no cap off CUDA)."""
    if device.type != "cuda":
        return 1 << 30
    return max(1, torch.cuda.get_device_properties(device).multi_processor_count - reserve)
