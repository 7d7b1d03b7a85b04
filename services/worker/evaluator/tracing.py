"""Traces one call of the reference inside a rank: which operators and collectives it runs, on
what sizes, where it waits on the host, and how data flows between matmuls and collectives.

The agents choose strategies from this structure (never from a workload's name). It runs in the
rank process because it executes workload code.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten

from kloom.opgraph import VIEW_OPS

from .graph_recorder import GraphRecorder

#: Operators after which the host must wait for the device (they break CUDA-graph capture).
HOST_SYNC_OPS = {
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::nonzero_static",
    "aten::masked_select",
    "aten::unique",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::unique_dim",
    "aten::repeat_interleave",
    "aten::is_nonzero",
    "aten::equal",
    "aten::item",
}
MATMUL_OPS = {"aten::mm", "aten::bmm", "aten::addmm", "aten::matmul", "aten::baddbmm", "aten::linear", "aten::_scaled_mm", "aten::_grouped_mm"}
ATTENTION_OPS = {
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_attention_math",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
}


def _storage(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


#: torch's functional collectives (``_c10d_functional``: what traced, compiled and DTensor code
#: calls) under the names of the ``c10d`` ops that ``torch.distributed``'s calls dispatch to,
#: which the strategist's rules use: the same collective is one name whichever API called it.
FUNCTIONAL_COLLECTIVES = {
    "all_reduce": "allreduce",
    "all_reduce_coalesced": "allreduce_coalesced",
    "all_gather_into_tensor": "_allgather_base",
    "all_gather_into_tensor_out": "_allgather_base",
    "all_gather_into_tensor_coalesced": "allgather_into_tensor_coalesced",
    "reduce_scatter_tensor": "_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor_coalesced",
    "all_to_all_single": "alltoall_base",
    "broadcast": "broadcast",
}
#: Ops of the collective namespaces that move no data: waiting, a barrier, autograd's wrapper.
NOT_TRANSFERS = ("wait_tensor", "barrier", "_wrap_tensor_autograd")


def collective_name(op: str) -> str:
    """``c10d::allreduce_`` -> ``allreduce``; ``_c10d_functional::all_reduce`` -> ``allreduce``."""
    namespace, _, name = op.partition("::")
    name = name.rstrip("_")
    return FUNCTIONAL_COLLECTIVES.get(name, name) if namespace == "_c10d_functional" else name


def _tensors(value: Any) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(value)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: GraphRecorder) -> None:
        super().__init__()
        self.events: list[dict] = []
        self.producer: dict[int, str] = {}  # storage -> kind of the op that last wrote it
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        ins = _tensors((args, kwargs))
        in_devices = {t.device.type for t in ins}
        out = func(*args, **kwargs)
        self.graph.record(func, args, kwargs, out)
        outs = _tensors(out)
        kind = "collective" if name.startswith("c10d::") or name.startswith("_c10d_functional::") else (
            "matmul" if name in MATMUL_OPS else "attention" if name in ATTENTION_OPS else "view" if name in VIEW_OPS else "compute"
        )
        consumed_from = sorted({self.producer[s] for t in ins if (s := _storage(t)) in self.producer})
        event = {
            "op": name,
            "kind": kind,
            "bytes_in": sum(t.numel() * t.element_size() for t in ins),
            "bytes_out": sum(t.numel() * t.element_size() for t in outs),
            "dtypes": sorted({str(t.dtype).replace("torch.", "") for t in ins + outs}),
            "consumes": consumed_from,
            "host_sync": name in HOST_SYNC_OPS or ("cuda" in in_devices and any(t.device.type == "cpu" for t in outs)),
        }
        self.events.append(event)
        if kind != "view":
            written = outs
            if kind == "collective" or name.endswith("_"):
                written = outs + [t for t in ins if t.is_floating_point() or t.is_complex() or t.dtype in (torch.int32, torch.int64)]
            for t in written:
                s = _storage(t)
                if s is not None:
                    self.producer[s] = kind
        else:
            for t in outs:
                s_out = _storage(t)
                src = [self.producer.get(_storage(i)) for i in ins if _storage(i) in self.producer]
                if s_out is not None and src:
                    self.producer[s_out] = src[0]
        return out


@contextmanager
def _subclasses_constructible() -> Iterator[None]:
    """Let code under the recorder construct plain tensor subclasses (``CausalBias(...)``, any
    ``class T(torch.Tensor)`` built by ``Tensor.__new__``): that allocates its storage through the
    dispatcher, the recorder hands the new tensor back as a Python ``Tensor``, and the subclass
    can then no longer claim it ("already associated to a python object"). Such constructions run
    outside the recorder: an empty allocation, nothing the trace misses.

    Dynamo registers its own stand-in for ``torch.Tensor.__new__`` when it is first imported and
    checks that stand-in's signature against whatever ``__new__`` is then: it is imported before
    the swap (a reference that compiles, or any torch code that imports it, would otherwise fail
    the trace), and the swap takes any arguments, as the check allows."""
    import torch._dynamo  # lazy: ~0.9 s, paid by the first trace (before the swap: see above)  # noqa: F401

    base = torch._C.TensorBase.__new__
    previous = vars(torch.Tensor).get("__new__")  # None: Tensor has no __new__ of its own

    def new(*args, **kwargs):
        if args and args[0] is torch.Tensor:
            return base(*args, **kwargs)
        with _disable_current_modes():
            return base(*args, **kwargs)

    torch.Tensor.__new__ = staticmethod(new)
    try:
        yield
    finally:
        if previous is not None:
            torch.Tensor.__new__ = previous
        else:
            del torch.Tensor.__new__


def trace_call(fn, inputs: list) -> dict[str, Any]:
    """Run ``fn(*inputs)`` once under the recorder and summarise what it did; ``op_graph`` is the
    call's op graph (``kloom.opgraph.OpGraph.to_dict``; ``fn``'s parameters and buffers are named
    when it is a module)."""
    graph = GraphRecorder(fn, inputs)
    recorder = _Recorder(graph)
    with torch.no_grad(), _subclasses_constructible(), recorder:
        out = fn(*inputs)
    events = recorder.events
    collectives = [
        {"op": collective_name(e["op"]), "bytes": max(e["bytes_in"], e["bytes_out"]), "dtypes": e["dtypes"]}
        for e in events
        if e["kind"] == "collective" and collective_name(e["op"]) not in NOT_TRANSFERS
    ]
    counts = Counter(e["op"] for e in events if e["kind"] != "view")
    patterns = set()
    for e in events:
        if e["kind"] in ("matmul", "attention") and "collective" in e["consumes"]:
            patterns.add(f"collective_then_{e['kind']}")
        if e["kind"] == "collective" and "matmul" in e["consumes"]:
            patterns.add(f"matmul_then_collective:{collective_name(e['op'])}")
        if e["kind"] == "collective" and "compute" in e["consumes"]:
            patterns.add("compute_then_collective")
        if e["kind"] == "compute" and "collective" in e["consumes"]:
            patterns.add("collective_then_compute")
    compute_events = [e for e in events if e["kind"] in ("compute", "matmul", "attention")]
    outs = _tensors(out)
    return {
        "ops": sorted(counts),
        "op_counts": dict(counts),
        "n_kernels": len(compute_events) + len(collectives),
        "n_elementwise": sum(1 for e in events if e["kind"] == "compute"),
        "n_matmul": sum(1 for e in events if e["kind"] == "matmul"),
        "n_attention": sum(1 for e in events if e["kind"] == "attention"),
        "collectives": collectives,
        "collective_bytes": sum(c["bytes"] for c in collectives),
        "host_syncs": sum(1 for e in events if e["host_sync"]),
        "host_sync_ops": sorted({e["op"] for e in events if e["host_sync"]}),
        "patterns": sorted(patterns),
        "output_shapes": [list(t.shape) for t in outs],
        "output_dtypes": [str(t.dtype).replace("torch.", "") for t in outs],
        # How many bins the step's torch.bincount calls count into (int64 counts: 8 bytes a bin),
        # which decides whether counting by comparison can beat it.
        "bincount_bins": max((e["bytes_out"] // 8 for e in events if e["op"] == "aten::bincount"), default=None),
        "op_graph": graph.finish(out).to_dict(),
    }


def _bounds(n: int, chunks: int) -> list[tuple[int, int]]:
    step = -(-n // chunks)
    return [(a, min(n, a + step)) for a in range(0, n, step)]


def _split_sets(inputs: list) -> tuple[int, list[list[int]]]:
    tensors = [(i, x) for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.dim() >= 1]
    if not tensors:
        return 0, []
    n = max(x.shape[0] for _, x in tensors)
    same = [i for i, x in tensors if x.shape[0] == n]
    sets = [same]
    first = tensors[0]
    if first[1].shape[0] == n and [first[0]] != same:
        sets.append([first[0]])
    return n, sets


def probe_row_split(model, make_inputs, *, chunks: int, compare) -> dict | None:
    """Whether the step computes row blocks independently: running it on ``chunks`` row slices
    of some inputs and concatenating the outputs gives the full result (within ``compare``'s
    tolerance). Then a candidate may pipeline the slices on several streams, overlapping one
    slice's collective with the next slice's compute. Every rank must take the same path, so the
    shapes that decide it are agreed over the process group first."""
    n, sets = _split_sets(make_inputs())
    decision = [n, sets]
    if dist.is_initialized() and dist.get_world_size() > 1:
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, decision)
        if any(d != decision for d in everyone):
            return None
    if n < 2 * chunks:
        return None
    with torch.no_grad():
        full, spec = tree_flatten(model(*make_inputs()))
        for arg_set in sets:
            parts = []
            inputs = make_inputs()
            for a, b in _bounds(n, chunks):
                sliced = [x[a:b] if i in arg_set else x for i, x in enumerate(inputs)]
                leaves, part_spec = tree_flatten(model(*sliced))
                parts.append(leaves)
            ok = str(part_spec) == str(spec) and all(
                isinstance(f, torch.Tensor) and f.dim() >= 1 and all(isinstance(p[j], torch.Tensor) for p in parts)
                for j, f in enumerate(full)
            )
            if ok:
                ok = all(compare(torch.cat([p[j] for p in parts], dim=0), f) for j, f in enumerate(full))
            local = torch.tensor([1.0 if ok else 0.0], device=full[0].device if full and isinstance(full[0], torch.Tensor) else "cpu")
            if dist.is_initialized() and dist.get_world_size() > 1:
                dist.all_reduce(local, op=dist.ReduceOp.MIN)
            if float(local.item()) == 1.0:
                return {"args": arg_set, "rows": n, "chunks_tested": chunks}
    return None
