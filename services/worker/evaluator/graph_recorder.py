"""Records the op graph (``kloom.opgraph``) of one reference call, operator by operator, inside
the tracer's dispatch mode (``tracing.py``).

Tensors are known by object: the forward's inputs, the module's parameters, buffers and tensor
attributes are registered before the call, every operator's outputs as it returns them. Nothing
is kept alive for the record: ids and storage groups are dropped when their tensor is freed (a
step over several GiB must not hold its intermediates), so a later tensor at a reused address is
a new value, as it should be.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch

from kloom.opgraph import Arg, Leaf, OpGraph, OpNode, TensorInfo

#: The most operators a graph records; a longer step is described by the trace's counts only.
MAX_NODES = 2000
#: Constants up to this many elements are kept by value (a ``torch.tensor([...])`` in a step).
MAX_CONSTANT_ELEMENTS = 64


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


class GraphRecorder:
    """Builds an ``OpGraph`` from the calls the dispatch mode sees."""

    def __init__(self, module: Any, inputs: list) -> None:
        self._ids: dict[int, int] = {}  # id(tensor object) -> current tensor id
        self._groups: dict[int, tuple[int, int]] = {}  # storage address -> (group, live tensors)
        self._next_id = 0
        self._next_group = 0
        self._finalizers: list[weakref.finalize] = []
        self.tensors: dict[int, TensorInfo] = {}
        self.nodes: list[OpNode] = []
        self.leaves: list[Leaf] = []
        self.reason = ""
        self.training = bool(module.training) if isinstance(module, torch.nn.Module) else None
        self.inputs = [self._leaf(x, "input", position=i) if isinstance(x, torch.Tensor) else self.encode(x) for i, x in enumerate(inputs)]
        if isinstance(module, torch.nn.Module):
            for name, p in module.named_parameters():
                self._leaf(p, "param", name=name)
            for name, b in module.named_buffers():
                self._leaf(b, "buffer", name=name)
            for prefix, sub in module.named_modules():
                for attr, value in sub.__dict__.items():
                    if isinstance(value, torch.Tensor) and id(value) not in self._ids:
                        self._leaf(value, "attr", name=f"{prefix}.{attr}" if prefix else attr)

    # Tensors -------------------------------------------------------------------------------------
    def _storage_group(self, t: torch.Tensor) -> int:
        try:
            address = t.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            address = 0
        if address == 0 or t.numel() == 0:
            self._next_group += 1
            return self._next_group - 1
        group, live = self._groups.get(address, (self._next_group, 0))
        if live == 0:
            group = self._next_group
            self._next_group += 1
        self._groups[address] = (group, live + 1)
        self._finalizers.append(weakref.finalize(t, self._release, address, group))
        return group

    def _release(self, address: int, group: int) -> None:
        current = self._groups.get(address)
        if current is not None and current[0] == group:
            if current[1] <= 1:
                del self._groups[address]
            else:
                self._groups[address] = (group, current[1] - 1)

    def _new(self, t: torch.Tensor) -> int:
        """The id of a tensor object seen for the first time."""
        tid = self._next_id
        self._next_id += 1
        self._ids[id(t)] = tid
        self._finalizers.append(weakref.finalize(t, self._ids.pop, id(t), None))
        storage = self._storage_group(t)
        self.tensors[tid] = TensorInfo(tid, tuple(t.shape), tuple(t.stride()), _dtype_name(t.dtype), t.device.type, storage, t.storage_offset())
        return tid

    def _version(self, t: torch.Tensor) -> int:
        """A new id for a tensor written in place (same memory, new value)."""
        old = self.tensors[self._ids[id(t)]]
        tid = self._next_id
        self._next_id += 1
        self._ids[id(t)] = tid
        self.tensors[tid] = TensorInfo(tid, tuple(t.shape), tuple(t.stride()), old.dtype, old.device, old.storage, t.storage_offset())
        return tid

    def _leaf(self, t: torch.Tensor, kind: str, *, position: int | None = None, name: str = "") -> dict:
        known = self._ids.get(id(t))
        if known is not None:
            return {"tensor": known}
        tid = self._new(t)
        values = None
        if kind == "constant":
            if t.numel() <= MAX_CONSTANT_ELEMENTS and not t.is_complex():
                values = t.detach().cpu().reshape(-1).tolist()
            elif not self.reason:
                self.reason = f"the step reads a {list(t.shape)} tensor that is neither an input nor an attribute of the module"
        self.leaves.append(Leaf(tid, kind, position, name, values))
        return {"tensor": tid}

    # Values --------------------------------------------------------------------------------------
    def encode(self, value: Any) -> Any:
        """An argument or return value in the graph's JSON-able encoding (``kloom.opgraph``)."""
        if isinstance(value, torch.Tensor):
            known = self._ids.get(id(value))
            return {"tensor": known} if known is not None else self._leaf(value, "constant")
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": str(value)}
        if isinstance(value, (list, tuple)):
            encoded = {"list": [self.encode(v) for v in value]}
            if isinstance(value, tuple):
                encoded["tuple"] = True
            return encoded
        if isinstance(value, torch.dtype):
            return {"dtype": _dtype_name(value)}
        if isinstance(value, torch.device):
            return {"device": value.type}
        if isinstance(value, torch.layout):
            return {"layout": str(value).replace("torch.", "")}
        if isinstance(value, torch.memory_format):
            return {"memory_format": str(value).replace("torch.", "")}
        return {"opaque": type(value).__name__}

    # Operators -----------------------------------------------------------------------------------
    def record(self, func, args: tuple, kwargs: dict, out: Any) -> None:
        """One operator call, after it ran: its arguments by schema name, what it wrote, what it
        returned."""
        if len(self.nodes) >= MAX_NODES:
            if not self.reason:
                self.reason = f"the step runs more than {MAX_NODES} operators"
            return
        schema = func._schema
        encoded: list[Arg] = []
        written: list[torch.Tensor] = []
        for i, spec in enumerate(schema.arguments):
            if i < len(args) and not spec.kwarg_only:
                value = args[i]
            elif spec.name in kwargs:
                value = kwargs[spec.name]
            elif spec.has_default_value():
                value = spec.default_value
            else:
                value = None
            encoded.append(Arg(spec.name, self.encode(value), spec.kwarg_only))
            if spec.alias_info is not None and spec.alias_info.is_write:
                written.extend(v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, torch.Tensor))
        before = [self._ids[id(t)] for t in written]
        versions = {id(t): self._version(t) for t in written}
        writes = tuple((old, versions[id(t)]) for old, t in zip(before, written))
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        ids: list[int | None] = []
        for o in outs:
            if not isinstance(o, torch.Tensor):
                ids.append(None)
            elif id(o) in versions:
                ids.append(versions[id(o)])
            elif id(o) in self._ids:
                ids.append(self._ids[id(o)])  # the operator returned one of its inputs unchanged
            else:
                ids.append(self._new(o))
        self.nodes.append(
            OpNode(
                index=len(self.nodes),
                op=schema.name,
                overload=func._overloadname if func._overloadname != "default" else "",
                args=tuple(encoded),
                outputs=tuple(ids),
                returns_tuple=isinstance(out, (list, tuple)),
                writes=writes,
            )
        )

    def finish(self, out: Any) -> OpGraph:
        """The graph of the finished call that returned ``out``."""
        outputs = self.encode(out)
        for f in self._finalizers:
            f.detach()  # the recorder need not outlive the step's tensors
        return OpGraph(
            tensors=self.tensors,
            nodes=self.nodes,
            leaves=self.leaves,
            inputs=self.inputs,
            outputs=outputs,
            complete=not self.reason,
            reason=self.reason,
            training=self.training,
        )
