"""What a candidate of the ``chunks`` wrapper of ``agents.strategist.codegen`` runs: the step on row
slices of its row-indexed inputs (``_KLOOM_CHUNK_ARGS``), each slice on the next of
``_KLOOM_STREAMS`` streams, so that one slice's collective overlaps the next slice's compute; the
outputs concatenated along the rows. The three constants are set per candidate from the plan and
the probe's row split.

This module is the runtime's only copy: tests import it, and ``agents.strategist.embed.runtime_source``
copies its code (all but this docstring) into each candidate, which can import no kloom module.
"""

import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree


_KLOOM_CHUNK_ARGS = (0,)
_KLOOM_CHUNKS = 2
_KLOOM_STREAMS = 2


def _kloom_bounds(n, chunks):
    step = -(-n // chunks)
    return [(a, min(n, a + step)) for a in range(0, n, step)]


def _kloom_cat(parts):
    """Concatenate the chunks' outputs leaf by leaf along the rows."""
    flat = [_kl_pytree.tree_flatten(p) for p in parts]
    spec = flat[0][1]
    leaves = [_kl_torch.cat([f[0][j] for f in flat], dim=0) for j in range(len(flat[0][0]))]
    return _kl_pytree.tree_unflatten(leaves, spec)


def _kloom_pipelined(fn, args, streams):
    """Run ``fn`` on row slices of the step's row-indexed inputs, each slice on the next stream,
    so that one slice's collective overlaps the next slice's compute; join the streams at the end."""
    n = args[_KLOOM_CHUNK_ARGS[0]].shape[0]
    current = _kl_torch.cuda.current_stream()
    parts = []
    for i, (a, b) in enumerate(_kloom_bounds(n, _KLOOM_CHUNKS)):
        stream = streams[i % len(streams)]
        stream.wait_stream(current)
        with _kl_torch.cuda.stream(stream):
            sliced = [x[a:b] if j in _KLOOM_CHUNK_ARGS else x for j, x in enumerate(args)]
            parts.append(fn(*sliced))
    for stream in streams:
        current.wait_stream(stream)
    for part in parts:
        for leaf in _kl_pytree.tree_leaves(part):
            if isinstance(leaf, _kl_torch.Tensor) and leaf.is_cuda:
                leaf.record_stream(current)
    return _kloom_cat(parts)
