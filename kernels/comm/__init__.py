"""Multi-GPU kernels that overlap communication with computation at tile level, written in Triton
over torch symmetric memory (peers' buffers mapped into each rank; NVLink multicast never used).

One module per fused kernel, each with its benchmark beside it (``*_bench.py``) and its tests
under ``tests/kernels/comm/``:

- ``ag_gemm``: all-gather + GEMM; every output tile waits only for the shard chunk its rows come from.
- ``gemm_rs``: GEMM + reduce-scatter; each tile is pushed to its owner as it finishes.
- ``gemm_ar``: GEMM + all-reduce; ``gemm_rs`` whose owners push the reduced tiles back to every rank.
- ``allreduce_norm``: one-shot and two-shot all-reduce fused with the residual add and RMSNorm.
- ``moe``: MoE dispatch and combine fused with the expert GEMMs.
- ``ring_kv``: the ring-attention KV exchange overlapped with the block attention.

``peers`` holds the buffers and flags every kernel shares (real symmetric memory, or ``world``
simulated ranks in one process for Triton's interpreter); ``signal`` the device-side flag
protocol. Modules import torch, triton and the standard library only: the offline strategist
inlines them into candidates (``agents/strategist/overlap``), which may import nothing else.
"""
