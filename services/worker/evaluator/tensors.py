"""Tensor plumbing shared by the rank processes and the judge: flattening outputs, exact
fingerprints of inputs, and scrubbing freed memory so that stale results cannot be read back."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

#: Every byte 0xFF: NaN for every floating dtype, -1 for integers.
POISON_BYTE = 0xFF


def flatten(value: Any) -> tuple[list[Any], str]:
    """Leaves and a printable structure of a (nested) output."""
    leaves, spec = pytree.tree_flatten(value)
    return leaves, str(spec)


def to_device(value: Any, device: torch.device) -> Any:
    return pytree.tree_map(
        lambda x: x.to(device) if isinstance(x, torch.Tensor) and x.device != device else x, value
    )


def detach_cpu(leaves: list[Any]) -> list[Any]:
    """Copies of the leaves on the CPU (tensors), or the values themselves (scalars, strings)."""
    out = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            out.append(leaf.detach().to("cpu", copy=True).contiguous())
        else:
            out.append(leaf)
    return out


def fingerprint(t: torch.Tensor) -> tuple:
    """An exact, order-sensitive digest of a tensor's bytes, computed where the tensor lives."""
    flat = t.detach().contiguous().view(-1)
    if flat.numel() == 0:
        return (tuple(t.shape), str(t.dtype), 0, 0)
    raw = flat.view(torch.uint8)
    pad = (-raw.numel()) % 4
    if pad:
        raw = torch.cat([raw, raw.new_zeros(pad)])
    words32 = raw.view(torch.int32)
    total = torch.zeros((), dtype=torch.int64, device=t.device)
    weighted = torch.zeros((), dtype=torch.int64, device=t.device)
    chunk = 1 << 20  # bounds the int64 temporaries to 8 MiB each
    for start in range(0, words32.numel(), chunk):
        words = words32[start : start + chunk].to(torch.int64)
        weights = torch.arange(start + 1, start + 1 + words.numel(), device=t.device, dtype=torch.int64) % 65521
        total += words.sum()
        weighted += (words * weights).sum()
    return (tuple(t.shape), str(t.dtype), int(total), int(weighted))


def bitwise_equal(a: torch.Tensor, b: torch.Tensor, chunk: int = 1 << 22) -> bool:
    """Whether two tensors hold the same bytes, compared ``chunk`` words at a time (a whole
    comparison would make a bool temporary as large as the tensor's element count)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    x, y = a.detach().contiguous().reshape(-1).view(torch.uint8), b.detach().contiguous().reshape(-1).view(torch.uint8)
    for word in (torch.int64, torch.int32, torch.int16):
        if x.numel() % word.itemsize == 0:
            x, y = x.view(word), y.view(word)
            break
    return all(torch.equal(x[i : i + chunk], y[i : i + chunk]) for i in range(0, x.numel(), chunk))


def fingerprints(values: list[Any]) -> list[tuple | None]:
    return [fingerprint(v) if isinstance(v, torch.Tensor) else None for v in values]


def plain_fingerprints(found: list[tuple | None]) -> list[list | None]:
    """``fingerprints`` as plain lists (shape as a list), as they compare after a trip between
    processes."""
    return [None if f is None else [list(f[0]), *f[1:]] for f in found]


def clone_tree(value: Any) -> Any:
    return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, value)


def scrub(sizes: list[int], device: torch.device) -> None:
    """Fill freed allocator blocks of the given byte sizes with NaN, then free them again.

    The caching allocator hands a new tensor the freed block that best fits it; allocating
    blocks of the sizes the outputs will have, all at once, poisons exactly the blocks a
    candidate's ``torch.empty`` would get back, so a candidate that returns uninitialised
    memory returns NaN rather than a reference result left behind.
    """
    held = []
    for size in sizes:
        if size <= 0:
            continue
        block = torch.empty(size, dtype=torch.uint8, device=device)
        block.fill_(POISON_BYTE)
        held.append(block)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    del held


def nbytes(leaves: list[Any]) -> list[int]:
    return [x.numel() * x.element_size() for x in leaves if isinstance(x, torch.Tensor)]
