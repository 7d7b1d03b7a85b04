"""The op graph of one reference call: the record the tracer writes in a rank process and the
strategist plans kernels from.

The tracer (``services/worker/evaluator/graph_recorder.py``) sees every aten operator the
reference runs, in order, with its arguments normalised against the operator's schema (every
argument by name, defaults filled in). Tensors get ids: the forward's inputs, the module's
parameters, buffers and tensor attributes (by attribute path), and every operator's outputs. An
operator that writes a tensor in place gives the written tensor a new id, so that an id always
names one value.

The record is plain data (JSON-able through ``to_dict``/``from_dict``) and imports nothing but
the standard library: rank processes and GPU images load it.

Argument values are encoded as:

- a plain ``int``/``float``/``bool``/``str``/``None`` for Python scalars (non-finite floats as
  ``{"float": "inf"}``, ``"-inf"``, ``"nan"``);
- ``{"tensor": id}`` for a tensor;
- ``{"list": [...]}`` for a list or tuple;
- ``{"dtype": "float32"}``, ``{"device": "cuda"}``, ``{"layout": "strided"}``,
  ``{"memory_format": "contiguous_format"}`` for those torch objects;
- ``{"opaque": "TypeName"}`` for anything else (a graph holding one cannot be replayed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

#: Where a tensor comes from when no operator of the step produced it.
LEAF_KINDS = ("input", "param", "buffer", "attr", "constant")
#: Matrix products, whose floating-point work ``OpGraph.node_flops`` counts (beside convolutions).
PRODUCT_OPS = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"})
DTYPE_BYTES = {"float64": 8, "int64": 8, "complex64": 8, "float32": 4, "int32": 4, "bfloat16": 2, "float16": 2, "int16": 2,
               "bool": 1, "uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}
#: Operators that only view their input (no arithmetic, no new storage): free in a roofline.
VIEW_OPS = frozenset({
    "aten::view", "aten::reshape", "aten::t", "aten::transpose", "aten::permute", "aten::expand", "aten::_unsafe_view", "aten::slice",
    "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::split", "aten::chunk", "aten::narrow", "aten::as_strided", "aten::detach", "aten::alias",
})  # fmt: skip


@dataclass(frozen=True)
class TensorInfo:
    """One tensor value: its metadata when it was made (or, for a leaf, when first seen)."""

    id: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str  # "float32", "bfloat16", "int64", "bool", ...
    device: str  # the device type: "cuda" or "cpu"
    storage: int  # tensors that share memory share this number
    offset: int = 0  # storage offset, in elements

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def contiguous(self) -> bool:
        """Row-major contiguous (size-1 dimensions may have any stride)."""
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.stride)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


@dataclass(frozen=True)
class Leaf:
    """A tensor the step read without making it: a forward input, a parameter, a buffer, a tensor
    attribute of the module, or a small constant (its values kept in ``values``)."""

    tensor: int
    kind: str  # one of LEAF_KINDS
    position: int | None = None  # forward argument position (kind "input")
    name: str = ""  # attribute path on the module (kinds "param", "buffer", "attr")
    values: list | None = None  # flat values of a small constant


@dataclass(frozen=True)
class Arg:
    """One schema argument of an operator call, with its encoded value."""

    name: str
    value: Any
    kwarg_only: bool = False


#: Batch norms whose schema does not mark the running statistics they update in training as written.
SILENT_RUNNING_STATS = frozenset({"aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::miopen_batch_norm"})


@dataclass(frozen=True)
class OpNode:
    """One operator call, in the order the step ran it."""

    index: int
    op: str  # "aten::add"
    overload: str  # "Tensor" ("" for the default overload)
    args: tuple[Arg, ...]
    outputs: tuple[int | None, ...]  # tensor ids of the returned values (None: not a tensor)
    returns_tuple: bool = False  # the operator returns a tuple (unpack ``outputs``)
    #: The input tensors it wrote in place: (id before, id after) pairs; the memory is the same,
    #: and readers after this node read the new id.
    writes: tuple[tuple[int, int], ...] = ()

    def arg(self, name: str, default: Any = None) -> Any:
        """The encoded value of the argument ``name``."""
        for a in self.args:
            if a.name == name:
                return a.value
        return default

    def tensor_args(self) -> list[int]:
        """Ids of every tensor this call reads, in argument order."""
        return [t for a in self.args for t in tensor_ids(a.value)]

    def written(self) -> list[int]:
        """Ids of the tensors this call writes in place: its ``writes``, and the running
        statistics a batch norm in training updates though its schema does not say so (the trace
        records no new version of them)."""
        silent = []
        if self.op in SILENT_RUNNING_STATS and self.arg("training"):
            silent = [t for name in ("running_mean", "running_var") for t in tensor_ids(self.arg(name))]
        return [old for old, _ in self.writes] + silent

    @property
    def name(self) -> str:
        """``aten::add.Tensor``: the operator with its overload."""
        return f"{self.op}.{self.overload}" if self.overload else self.op


@dataclass
class OpGraph:
    """The operators of one call of the reference, the tensors they pass, and where the step's
    leaves come from. ``complete`` is False when the recorder stopped (``reason`` says why): such
    a graph describes the step but cannot be replayed."""

    tensors: dict[int, TensorInfo]
    nodes: list[OpNode]
    leaves: list[Leaf]
    inputs: list[Any]  # per forward argument: {"tensor": id} or its encoded value
    outputs: Any  # the step's return value, encoded
    complete: bool = True
    reason: str = ""
    training: bool | None = None  # the module's training flag during the call (None: not a module)

    # Questions the strategist asks -------------------------------------------------------------
    def producer(self) -> dict[int, int]:
        """Tensor id -> index of the node that made it (or wrote this version of it in place)."""
        made = {t: n.index for n in self.nodes for t in n.outputs if t is not None}
        made.update({new: n.index for n in self.nodes for _, new in n.writes})
        return made

    def consumers(self) -> dict[int, list[int]]:
        """Tensor id -> indexes of the nodes that read it (in order; a node once per tensor)."""
        users: dict[int, list[int]] = {}
        for n in self.nodes:
            for t in dict.fromkeys(n.tensor_args()):
                users.setdefault(t, []).append(n.index)
        return users

    def output_ids(self) -> set[int]:
        """Ids of the tensors the step returns."""
        return set(tensor_ids(self.outputs))

    def leaf(self, tensor: int) -> Leaf | None:
        return next((l for l in self.leaves if l.tensor == tensor), None)

    # What the step costs at the least ------------------------------------------------------------
    def bytes_of(self, tensors) -> int:
        """The bytes of the tensors ``tensors`` names (ids the graph does not know count 0)."""
        return sum(self.tensors[t].numel * DTYPE_BYTES.get(self.tensors[t].dtype, 4) for t in set(tensors) if t in self.tensors)

    def node_flops(self, node: OpNode) -> int:
        """Floating-point operations of a product or a convolution (0 for any other operator)."""
        out = self.tensors.get(node.outputs[0]) if node.outputs and node.outputs[0] is not None else None
        if out is None:
            return 0
        args = node.tensor_args()
        if node.op in PRODUCT_OPS:
            a = self.tensors[args[-2] if node.op in ("aten::addmm", "aten::baddbmm") else args[0]]
            return 2 * out.numel * a.shape[-1]
        if node.op == "aten::convolution":
            return self._convolution_flops(node, self.tensors[args[0]], self.tensors[args[1]], out)
        return 0

    @staticmethod
    def _convolution_flops(node: OpNode, x: TensorInfo, weight: TensorInfo, out: TensorInfo) -> int:
        """Multiply-adds of a convolution that land: a tap reading outside the input (padding) and,
        for a transposed convolution, an input's contribution to a cropped-off or skipped output
        (stride, padding) do no work. Counted per spatial dimension (they are independent), times
        batch x output channels x input channels a group."""
        spatial = len(weight.shape) - 2
        if spatial < 1 or len(x.shape) != spatial + 2 or len(out.shape) != spatial + 2:
            return 0
        transposed = bool(node.arg("transposed"))
        groups = node.arg("groups", 1) or 1
        in_per_group = weight.shape[0] // groups if transposed else weight.shape[1]
        pairs = 1
        for d in range(spatial):
            stride, padding, dilation = (_dim(node.arg(name), d, default) for name, default in (("stride", 1), ("padding", 0), ("dilation", 1)))
            # A forward convolution walks outputs and reads inputs; a transposed one walks inputs
            # and writes outputs, at the same index arithmetic.
            walked, reached = (x.shape[2 + d], out.shape[2 + d]) if transposed else (out.shape[2 + d], x.shape[2 + d])
            pairs *= sum(_landing(walked, reached, stride, k * dilation - padding) for k in range(weight.shape[2 + d]))
        return 2 * out.shape[0] * out.shape[1] * in_per_group * pairs

    def least_traffic(self) -> int:
        """Bytes any implementation of the step must move: every leaf an operator reads (inputs,
        parameters, buffers) once, and the returned tensors once; everything between them could
        stay on chip."""
        leaves = {l.tensor for l in self.leaves}
        read = {t for n in self.nodes for t in n.tensor_args() if t in leaves}
        return self.bytes_of(read | self.output_ids())

    # Serialising ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "tensors": [
                [t.id, list(t.shape), list(t.stride), t.dtype, t.device, t.storage, t.offset] for t in self.tensors.values()
            ],
            "nodes": [
                {
                    "op": n.op,
                    "overload": n.overload,
                    "args": [[a.name, a.value, a.kwarg_only] for a in n.args],
                    "outputs": list(n.outputs),
                    "returns_tuple": n.returns_tuple,
                    "writes": [list(w) for w in n.writes],
                }
                for n in self.nodes
            ],
            "leaves": [
                {"tensor": l.tensor, "kind": l.kind, "position": l.position, "name": l.name, "values": l.values} for l in self.leaves
            ],
            "inputs": self.inputs,
            "outputs": self.outputs,
            "complete": self.complete,
            "reason": self.reason,
            "training": self.training,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OpGraph":
        tensors = {
            int(t[0]): TensorInfo(int(t[0]), tuple(t[1]), tuple(t[2]), t[3], t[4], int(t[5]), int(t[6])) for t in data["tensors"]
        }
        nodes = [
            OpNode(
                index=i,
                op=n["op"],
                overload=n["overload"],
                args=tuple(Arg(a[0], a[1], bool(a[2])) for a in n["args"]),
                outputs=tuple(n["outputs"]),
                returns_tuple=bool(n["returns_tuple"]),
                writes=tuple((int(w[0]), int(w[1])) for w in n["writes"]),
            )
            for i, n in enumerate(data["nodes"])
        ]
        leaves = [Leaf(l["tensor"], l["kind"], l.get("position"), l.get("name", ""), l.get("values")) for l in data["leaves"]]
        return cls(
            tensors, nodes, leaves, data["inputs"], data["outputs"], bool(data.get("complete", True)), data.get("reason", ""), data.get("training")
        )


def tensor_ids(value: Any) -> Iterator[int]:
    """Every tensor id in an encoded value, in order."""
    if isinstance(value, dict):
        if "tensor" in value:
            yield value["tensor"]
        elif "list" in value:
            for v in value["list"]:
                yield from tensor_ids(v)


def decode_float(value: Any) -> Any:
    """An encoded scalar as its Python value (non-finite floats decoded)."""
    if isinstance(value, dict) and "float" in value:
        return float(value["float"])
    return value


def has_opaque(value: Any) -> bool:
    """Whether an encoded value holds something the encoding could not name."""
    if isinstance(value, dict):
        if "opaque" in value:
            return True
        if "list" in value:
            return any(has_opaque(v) for v in value["list"])
    return False


def int_list(value: Any) -> list | None:
    """An encoded int or list-of-ints argument as a list (a size, stride or padding), else None."""
    if isinstance(value, dict) and "list" in value:
        items = [decode_float(v) for v in value["list"]]
        return items if all(isinstance(v, int) for v in items) else None
    return [value] if isinstance(value, int) else None


def _dim(value: Any, d: int, default: int) -> int:
    """Dimension ``d`` of an encoded int or int-list argument (a stride, padding or dilation); a
    single value applies to every dimension."""
    items = int_list(value)
    if not items or (d >= len(items) and len(items) != 1):
        return default
    return items[d] if d < len(items) else items[0]


def _landing(walked: int, reached: int, stride: int, shift: int) -> int:
    """How many of ``j`` in ``[0, walked)`` land inside ``[0, reached)`` at ``j * stride + shift``."""
    if walked <= 0 or reached <= 0 or stride <= 0:
        return 0
    first = max(0, -(shift // stride)) if shift < 0 else 0  # ceil(-shift / stride)
    last = min(walked - 1, (reached - 1 - shift) // stride)
    return max(0, last - first + 1)
