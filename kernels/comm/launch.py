"""A Triton launch without Triton's per-call argument binding, for kernels launched thousands of
times with the same arguments but a few per-call numbers (the latency-bound all-reduce).

Measured on 2xH200 (``benchmarks/gpu/launch_cost.py``): an 8 KiB all-reduce through
``kernel[grid](...)`` cost the host 90 us a call and the GPU finished each in less, so the host set
the pace (torch's symmetric-memory one-shot: 18 us; NCCL: 47 us). Most of it was Triton binding,
specialising and hashing the arguments again on every call. Through this module: 45 us.

``launch`` does that work the first time for a *key*, keeps the compiled kernel, and from then on
hands the arguments straight to its launcher. The key is finer than Triton's own specialisation,
so a hit never runs a kernel compiled for other arguments:

- a tensor: its dtype and whether its address is 16-byte aligned (Triton's pointer specialisation);
- a scalar that Triton specialises: its exact value and type;
- a ``do_not_specialize`` integer: only whether it fits int32 (Triton types it i32 or i64 by value);
  outside int32 the call takes the ordinary path;
- every constexpr and launch option: exact; and the current device.

Under Triton's interpreter (the CPU tests), with launch hooks installed (a profiler's), or when the
launch returns no compiled kernel, every call takes the ordinary path.
"""

from __future__ import annotations

import torch
from triton import knobs
from triton.compiler.compiler import CompiledKernel

_INT32 = (-(1 << 31), (1 << 31) - 1)
#: Compiled kernels kept per (kernel, key); cleared when full (a workload whose shapes never repeat).
MAX_ENTRIES = 256
_cache: dict[tuple, tuple[CompiledKernel, tuple]] = {}  # key -> (compiled kernel, constexpr values in order)


def _hooks_installed() -> bool:
    """Whether a launch hook is set (Triton 3.6 keeps them in always-present, usually empty, chains)."""
    hooks = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
    return any(h is not None and bool(getattr(h, "calls", True)) for h in hooks)


#: Per kernel (its id: kernels are module-level and live as long as the process): which
#: parameters are ``do_not_specialize`` (checked once).
_per_call: dict[int, tuple[object, tuple[bool, ...]]] = {}


def _key(kernel, args: tuple, meta: dict) -> tuple | None:
    # Kernels by identity (hashing a JITFunction goes through its source's cache key); the entry
    # holds the kernel, so its id is never reused while keys name it.
    seen = _per_call.get(id(kernel))
    if seen is None or seen[0] is not kernel or len(seen[1]) != len(args):
        if any(i < len(args) for i in kernel.constexprs):
            raise ValueError(f"{kernel.arg_names}: launch needs the constexpr parameters after all the others")
        seen = _per_call[id(kernel)] = (kernel, tuple(p.do_not_specialize for p in kernel.params[: len(args)]))
    per_call = seen[1]
    parts = []
    for a, free in zip(args, per_call):
        if isinstance(a, torch.Tensor):
            parts.append((a.dtype, a.data_ptr() & 15 == 0))
        elif free:
            if type(a) is not int or not _INT32[0] <= a <= _INT32[1]:
                return None
            parts.append(int)
        else:
            parts.append((type(a), a))
    # The compiled kernel's handle belongs to the device current at its first launch.
    return (id(kernel), torch.cuda.current_device() if torch.cuda.is_initialized() else -1, tuple(parts), tuple(meta.items()))


def launch(kernel, grid: int, args: tuple, meta: dict) -> None:
    """``kernel[(grid,)](*args, **meta)``: ``args`` the non-constexpr parameters in order,
    ``meta`` every constexpr by name and the launch options (``num_warps``, ...)."""
    key = _key(kernel, args, meta) if args[0].is_cuda else None
    hit = _cache.get(key) if key is not None else None
    if hit is None or _hooks_installed():
        compiled = kernel[(grid,)](*args, **meta)
        if key is not None and isinstance(compiled, CompiledKernel):
            if len(_cache) >= MAX_ENTRIES:
                _cache.clear()
            _cache[key] = (compiled, tuple(meta[name] for name in kernel.arg_names[len(args) :]))
        return
    compiled, constexprs = hit
    # The current device's current stream, as Triton's own launch takes it (the key names that device).
    stream = torch._C._cuda_getCurrentRawStream(key[1])
    compiled.run(grid, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None, *args, *constexprs)
