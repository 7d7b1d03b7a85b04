"""The overlap strategy's source rewrite and the helper block its candidates carry.

Applied in order to the reference's source: all-gather + matmul and matmul + reduce-scatter pairs
(``fused_matmul/``'s structural rules, so the same pairs as the ``fused_ag_matmul`` strategy),
matmul + all-reduce pairs (``matmul_ar.py``), all-reduce + residual add + RMSNorm
(``ar_norm.py``), ring loops whose exchange is a plain ring shift (``ring.py``), and then every remaining ``all_reduce`` call is renamed to a helper that takes
the comm kernel's one-shot or two-shot all-reduce where it applies and is faster. Every helper
falls back to the original calls (``runtime.py``), so the rewrite changes how, never what.
"""

from __future__ import annotations

from ..embed import inline_modules
from ..fused_matmul import fused_ag_matmul
from ..rewrites import count_calls, rename_collective
from .ar_norm import all_reduce_rmsnorm
from .matmul_ar import matmul_all_reduce
from .ring import ring_exchange

#: The modules a candidate carries, each after those it imports.
MODULES = [
    "kernels.comm.peers",
    "kernels.comm.signal",
    "kernels.comm.launch",
    "kernels.comm.tiles",
    "kernels.comm.ag_gemm",
    "kernels.comm.gemm_rs",
    "kernels.comm.gemm_ar",
    "kernels.comm.allreduce_norm",
    "kernels.comm.ring_kv",
    "agents.strategist.overlap.runtime",
    "agents.strategist.overlap.ar_runtime",
    "agents.strategist.overlap.ring_runtime",
]
#: The names the rewritten reference calls (and the tests read), kept as they are.
ENTRY_POINTS = frozenset({
    "_kloom_ag_matmul", "_KloomProduct", "_kloom_matmul_rs", "_kloom_matmul_ar", "_kloom_ar_add_rmsnorm", "_kloom_ar_add_rmsnorm_scaled",
    "_kloom_comm_all_reduce", "_KloomRing", "_KL_OVERLAP", "_KL_OVERLAP_STRICT", "_KL_OVERLAP_FORCE",
})  # fmt: skip

OVERLAP_HELPER = "\n\n# ---- kloom overlap: comm kernels and their runtime ----\n" + inline_modules(MODULES, ENTRY_POINTS)


def overlap_rewrite(source: str) -> tuple[str, int]:
    """The source with every pattern the comm kernels serve routed through their helpers; returns
    it and the number of calls changed (0: unchanged)."""
    total = 0
    for rewrite in (fused_ag_matmul, matmul_all_reduce, all_reduce_rmsnorm, ring_exchange):
        source, n = rewrite(source)
        total += n
    if count_calls(source, "all_reduce"):
        source, n = rename_collective(source, "all_reduce", "_kloom_comm_all_reduce")
        source += "\n"
        total += n
    return source, total
