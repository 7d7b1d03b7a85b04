"""Writes candidate files for the offline strategist.

A candidate is the reference's own source (so it computes the same math, with the same parameter
initialisation), optionally rewritten (``rewrites.py``), followed by ``ModelNew``, a subclass of
that ``Model`` whose ``forward`` runs the reference's computation through a wrapper: a whole-step
CUDA graph, ``torch.compile`` in a chosen mode, or both.
"""

from __future__ import annotations

import json
from typing import Any

from .attention import SPLIT_ATTENTION_HELPER, split_causal_attention
from .bincount import BINCOUNT_HELPER, few_bin_count
from .coalesce import COALESCE_HELPER, coalesce_allreduces
from .depthwise import DEPTHWISE_HELPER, depthwise_conv
from .embed import runtime_source
from .fused_matmul import FUSED_MATMUL_HELPER, fused_ag_matmul
from .gather import GATHER_HELPER, gather_into_tensor
from .overlap.rewrite import OVERLAP_HELPER, overlap_rewrite
from .prefetch import PREFETCH_HELPER, prefetch_exchange
from .rewrites import count_calls, rename_collective
from .symm_allreduce import symm_allreduce_helper

#: Rewrites that restructure the reference's source: name -> (rewrite returning the new source
#: and how many calls it changed, the helpers it needs, why it does not apply when it changed none).
SOURCE_REWRITES = {
    "coalesce_allreduce": (coalesce_allreduces, COALESCE_HELPER, "the reference has no independent all-reduces with the same reduction to merge"),
    "gather_into_tensor": (gather_into_tensor, GATHER_HELPER, "the reference concatenates no list that an all_gather fills"),
    "depthwise_conv": (depthwise_conv, DEPTHWISE_HELPER, "the reference calls no conv1d/conv2d that can be depthwise (groups set, stride and dilation 1)"),
    "fused_ag_matmul": (fused_ag_matmul, FUSED_MATMUL_HELPER, "the reference has no all_gather_into_tensor feeding a matmul, nor a matmul feeding a reduce_scatter_tensor, that may fuse"),
    "prefetch_exchange": (prefetch_exchange, PREFETCH_HELPER, "the reference has no loop whose carried state a point-to-point exchange passes on"),
    "few_bin_count": (few_bin_count, BINCOUNT_HELPER, "the reference calls no torch.bincount"),
    "split_causal_attention": (split_causal_attention, SPLIT_ATTENTION_HELPER, "the reference passes no bottom-right causal mask to scaled_dot_product_attention"),
    "overlap": (overlap_rewrite, OVERLAP_HELPER, "the reference has no collective that kloom's comm kernels fuse with the computation around it"),
}


def source_rewrites(source: str) -> dict[str, int]:
    """The source rewrites that apply to the reference, each with the number of calls it changes."""
    found = {name: rewrite(source)[1] for name, (rewrite, _, _) in SOURCE_REWRITES.items()}
    return {name: count for name, count in found.items() if count}

_HEADER = '''

# ---- kloom offline strategist: {label} ----
import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree
'''


_MODEL_NEW = '''

class ModelNew(Model):
    """The reference's computation{description}."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kloom_graphs = {{}}
        self._kloom_streams = []
        self._kloom_fn = {fn_expr}

    def _kloom_eager(self, *args):
        return super().forward(*args)

    def forward(self, *args):
{body}
'''

_BODY_DIRECT = '''        return self._kloom_fn(*args)'''

_BODY_COMPILED_CLONE = '''        out = self._kloom_fn(*args)
        # cudagraph trees reuse output buffers on the next call: hand back owned tensors.
        return _kl_pytree.tree_map(lambda t: t.clone() if isinstance(t, _kl_torch.Tensor) else t, out)'''

_BODY_GRAPH = '''        return _kloom_graphed(self._kloom_graphs, self._kloom_fn, args, {warmup}, {mutated})'''



_BODY_CHUNKS = '''        if not all(a.is_cuda for a in args if isinstance(a, _kl_torch.Tensor)):
            return self._kloom_fn(*args)
        if not self._kloom_streams:
            self._kloom_streams = [_kl_torch.cuda.Stream() for _ in range(_KLOOM_STREAMS)]
        return _kloom_pipelined(self._kloom_fn, list(args), self._kloom_streams)'''


class NotApplicable(Exception):
    """The strategy cannot be written for this workload; the message says why."""


def render(source: str, params: dict[str, Any], *, mutated_inputs: list[int], label: str, row_split: dict | None = None) -> str:
    """The candidate source for ``params``:

    - ``wrapper``: ``none`` | ``graph`` | ``compile`` | ``compile_graph``
    - ``compile_mode``: a ``torch.compile`` mode (``default``, ``reduce-overhead``, ``max-autotune``, ``max-autotune-no-cudagraphs``)
    - ``compile_options``: inductor options (instead of a mode)
    - ``rewrites``: ``["symm_allreduce"]``, with ``symm_max_bytes`` and ``symm_algo`` (``one_shot`` | ``two_shot``);
      ``["coalesce_allreduce"]``: independent all-reduces merged into one (``coalesce/``);
      ``["gather_into_tensor"]``: list all-gather + cat as one all_gather_into_tensor (``gather/``);
      ``["depthwise_conv"]``: depthwise conv1d/conv2d as shifted multiply-adds inductor can fuse (``depthwise/``)
      ``["fused_ag_matmul"]``: all-gather + matmul / matmul + reduce-scatter as symmetric-memory fused ops (``fused_matmul/``)
      ``["prefetch_exchange"]``: a loop-carried point-to-point exchange issued one iteration early on a side stream (``prefetch/``)
      ``["few_bin_count"]``: ``torch.bincount`` into a few bins by comparison and column sums (``bincount/``)
      ``["split_causal_attention"]``: bottom-right causal attention as an unmasked and a square causal piece (``attention/``)
      ``["overlap"]``: collectives fused with the matmuls and norms around them by kloom's comm kernels (``overlap/``)
    - ``warmup``: warm-up calls before a graph capture
    - ``chunks``/``streams``/``inner``: for the ``chunks`` wrapper (row slices pipelined on streams)
    - ``dynamic``: compile with dynamic shapes (steps whose shapes change between calls)
    """
    body_source = source.rstrip() + "\n"
    helpers = ""
    for rewrite in params.get("rewrites", []):
        if rewrite == "symm_allreduce":
            if count_calls(body_source, "all_reduce") == 0:
                raise NotApplicable("the reference calls no torch.distributed.all_reduce to rewrite")
            body_source, _ = rename_collective(body_source, "all_reduce", "_kloom_all_reduce")
            body_source += "\n"
            helpers += symm_allreduce_helper(int(params.get("symm_max_bytes", 8 << 20)), params.get("symm_algo", "one_shot"))
        elif rewrite in SOURCE_REWRITES:
            apply, helper, why_not = SOURCE_REWRITES[rewrite]
            body_source, changed = apply(body_source)
            if changed == 0:
                raise NotApplicable(why_not)
            helpers += helper
        else:
            raise NotApplicable(f"unknown rewrite {rewrite!r}")

    wrapper = params.get("wrapper", "none")
    mode = params.get("compile_mode", "default")
    options = params.get("compile_options")
    # Shapes that change between calls (host-synchronised splits) need dynamic shapes; fixed ones don't.
    dynamic = "None" if params.get("dynamic") else "False"
    if options:
        compile_expr = f"_kl_torch.compile(self._kloom_eager, dynamic={dynamic}, options={options!r})"
    else:
        compile_expr = f"_kl_torch.compile(self._kloom_eager, dynamic={dynamic}, mode={mode!r})"
    description = {
        "none": "",
        "graph": ", replayed from a whole-step CUDA graph",
        "compile": f", compiled with torch.compile ({'options ' + json.dumps(options) if options else 'mode ' + mode})",
        "compile_graph": ", compiled with torch.compile and replayed from a whole-step CUDA graph",
        "chunks": f", pipelined over {params.get('chunks', 2)} row slices on {params.get('streams', 2)} streams"
        + (" (each slice compiled)" if params.get("inner") == "compile" else ""),
    }[wrapper]
    if params.get("rewrites"):
        description += f", with rewritten calls ({', '.join(params['rewrites'])})"
    if wrapper == "none":
        fn_expr, body = "self._kloom_eager", _BODY_DIRECT
    elif wrapper == "compile":
        fn_expr = compile_expr
        # Modes with CUDA graphs (cudagraph trees) reuse output buffers on the next call.
        body = _BODY_COMPILED_CLONE if (mode in ("reduce-overhead", "max-autotune") and not options) else _BODY_DIRECT
    elif wrapper in ("graph", "compile_graph"):
        fn_expr = "self._kloom_eager" if wrapper == "graph" else compile_expr
        body = _BODY_GRAPH.format(warmup=int(params.get("warmup", 3)), mutated=list(mutated_inputs))
    elif wrapper == "chunks":
        if not row_split:
            raise NotApplicable("the reference's row blocks are not independent (the probe found no row split)")
        fn_expr = compile_expr if params.get("inner") == "compile" else "self._kloom_eager"
        body = _BODY_CHUNKS
    else:
        raise NotApplicable(f"unknown wrapper {wrapper!r}")
    graph_helpers = runtime_source(f"{__package__}.cuda_graph.runtime") if wrapper in ("graph", "compile_graph") else ""
    if wrapper == "chunks":
        graph_helpers = runtime_source(f"{__package__}.row_chunks.runtime", _KLOOM_CHUNK_ARGS=tuple(int(a) for a in row_split["args"]),
                                       _KLOOM_CHUNKS=int(params.get("chunks", 2)), _KLOOM_STREAMS=int(params.get("streams", 2)))
    return (
        body_source
        + helpers
        + _HEADER.format(label=label)
        + graph_helpers
        + _MODEL_NEW.format(description=description, fn_expr=fn_expr, body=body)
    )
