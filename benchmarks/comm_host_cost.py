"""The host's cost per call of the comm all-reduce's Python path (``allreduce_norm.all_reduce`` ->
``_launch`` -> ``launch``'s key and cache lookup), with only the compiled kernel's C launcher left
out, on this machine's CPU. At the latency-bound sizes the host sets the pace on GPUs
(``benchmarks/gpu/launch_cost.py``: 45 us a call on 2xH200, where torch's one-shot costs 22), so
this part, which needs no GPU, is measured here. Best of 3 rounds of 20000 calls after 500.

    TRITON_INTERPRET=1 python3 benchmarks/comm_host_cost.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from kernels.comm import allreduce_norm as arn  # noqa: E402
from kernels.comm import launch as L  # noqa: E402
from kernels.comm.peers import emulated_peers  # noqa: E402


def _parameters(x_ptr, res_ptr, w_ptr, h_ptr, y_ptr, buf_ptr, flags_ptr, status_ptr, data_ptrs, flag_ptrs, T, H, n_total, eps, rank, world, epoch, parity_offset, max_spins,
                BLOCK_H: tl.constexpr, TWO_SHOT: tl.constexpr, SHARDED: tl.constexpr, RESIDUAL: tl.constexpr, NORM: tl.constexpr, WEIGHT: tl.constexpr, STORE_H: tl.constexpr, PHASE: tl.constexpr):  # fmt: skip
    pass


#: The kernel's parameter list as a compiled-mode JITFunction (the interpreter's object has none).
KERNEL = JITFunction(_parameters, do_not_specialize=["epoch", "parity_offset"])


def per_call_us(fn, n: int = 20000) -> float:
    for _ in range(500):
        fn()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def main() -> None:
    x = torch.randn(4096, dtype=torch.bfloat16)  # 8 KiB
    world = 2
    peers = emulated_peers(world, arn.buffer_numel(world, x.numel()), x.dtype, max(arn.flags_needed(world, c) for c in arn.TUNING.values()))[0]
    cache: dict = {}

    def launch_without_the_c_launcher(kernel, grid, args, meta):
        key = L._key(KERNEL, args, meta)
        L._hooks_installed()
        cache.get(key)

    arn.launch = launch_without_the_c_launcher
    print(f"all_reduce 8 KiB, host path without the C launcher: {per_call_us(lambda: arn.all_reduce(x, peers, arn.TUNING['one_shot'])):.1f} us a call")


if __name__ == "__main__":
    main()
