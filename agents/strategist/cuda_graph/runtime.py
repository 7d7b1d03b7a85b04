"""What a candidate wrapped in a CUDA graph runs (the ``graph`` and ``compile_graph`` wrappers of
``agents.strategist.codegen``): per input signature, warm the step up on a side stream, capture one
call on static copies of its inputs, and replay it with each call's inputs copied in.

This module is the runtime's only copy: tests import it, and ``agents.strategist.embed.runtime_source``
copies its code (all but this docstring) into each candidate, which can import no kloom module.
"""

import torch as _kl_torch
from torch.utils import _pytree as _kl_pytree


def _kloom_key(args):
    return tuple(
        (tuple(a.shape), a.dtype, a.device, a.stride()) if isinstance(a, _kl_torch.Tensor) else ("value", repr(a))
        for a in args
    )


def _kloom_clone_inputs(args):
    return [a.clone() if isinstance(a, _kl_torch.Tensor) else a for a in args]


def _kloom_capture(fn, args, warmup):
    """Warm ``fn`` up on a side stream (compiling and allocating what it needs), then capture one
    call on static copies of the inputs in a CUDA graph. Every rank captures the same calls, so
    collectives inside are captured on all ranks together."""
    static = _kloom_clone_inputs(args)
    side = _kl_torch.cuda.Stream()
    side.wait_stream(_kl_torch.cuda.current_stream())
    with _kl_torch.cuda.stream(side):
        for _ in range(warmup):
            fn(*_kloom_clone_inputs(args))
    _kl_torch.cuda.current_stream().wait_stream(side)
    _kl_torch.cuda.synchronize()
    graph = _kl_torch.cuda.CUDAGraph()
    with _kl_torch.cuda.graph(graph, capture_error_mode="thread_local"):
        out = fn(*static)
    return graph, static, out


def _kloom_replay(entry, args, mutated):
    """Copy this call's inputs into the graph's static buffers, replay, copy back the inputs the
    reference modifies in place, and return fresh copies of the outputs (the graph reuses its
    buffers on the next call)."""
    graph, static, out = entry
    for buffer, arg in zip(static, args):
        if isinstance(buffer, _kl_torch.Tensor):
            buffer.copy_(arg)
    graph.replay()
    for i in mutated:
        args[i].copy_(static[i])
    return _kl_pytree.tree_map(lambda t: t.clone() if isinstance(t, _kl_torch.Tensor) else t, out)


def _kloom_graphed(graphs, fn, args, warmup, mutated):
    """``fn`` on ``args`` through the CUDA graph kept in ``graphs`` for their signature, captured
    at the first call with it; where an input is not on a GPU, ``fn`` itself."""
    if not all(a.is_cuda for a in args if isinstance(a, _kl_torch.Tensor)):
        return fn(*args)
    key = _kloom_key(args)
    entry = graphs.get(key)
    if entry is None:
        entry = graphs[key] = _kloom_capture(fn, args, warmup)
    return _kloom_replay(entry, list(args), mutated)
