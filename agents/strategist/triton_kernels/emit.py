"""Writes the kernel candidate: the reference's source, the embedded kernel modules, and
``ModelNew``, whose ``forward`` replays the traced op graph operator by operator
(``torch.ops.aten.<op>.<overload>``), each matched region replaced by its kernel call.

The replay is exact only for what was traced, so ``forward`` first checks that its inputs are
the traced ones in shape, strides, dtype and device (non-tensor inputs by value) and that the
module is in the traced training mode; anything else runs the reference's forward. A graph the
replay cannot reproduce (random numbers, a value read back to the host, collectives, an argument
the record could not name) is refused with ``NotReplayable``.
"""

from __future__ import annotations

import ast

from kloom.opgraph import OpGraph, decode_float, has_opaque, tensor_ids
from kloom.tuning import TunedConfig

from ..embed import bound_names, clashes, embed_kernels, runtime_source
from .compiled import CompiledRegions, NotCompilable
from .templates import Match, laid_out

#: Operators whose results the replay cannot reproduce (random draws).
RANDOM_OPS = frozenset({
    "aten::rand", "aten::rand_like", "aten::randn", "aten::randn_like", "aten::randint", "aten::randint_like",
    "aten::randperm", "aten::normal", "aten::normal_", "aten::uniform_", "aten::bernoulli", "aten::bernoulli_",
    "aten::native_dropout", "aten::multinomial", "aten::exponential_", "aten::geometric_", "aten::cauchy_",
    "aten::log_normal_", "aten::poisson", "aten::random_", "aten::rrelu_with_noise", "aten::_fused_dropout",
})  # fmt: skip


class NotReplayable(ValueError):
    """The graph cannot be replayed faithfully; the message says why."""


def replay_problem(graph: OpGraph) -> str:
    """Why the graph cannot be replayed ("" when it can)."""
    if not graph.complete:
        return graph.reason or "the recorder stopped before the step ended"
    for node in graph.nodes:
        if node.op in RANDOM_OPS:
            return f"the step draws random numbers ({node.op})"
        if not node.op.startswith("aten::"):
            return f"the step calls {node.op}, which the replay does not reproduce"
        if any(o is None for o in node.outputs):
            return f"{node.op} returns a value to the host, which later operators may depend on"
        if any(has_opaque(a.value) for a in node.args):
            return f"{node.op} takes an argument the trace could not record"
    for leaf in graph.leaves:
        if leaf.kind == "constant" and leaf.values is None:
            return "the step reads a tensor that is neither an input nor an attribute of the module"
    if any(has_opaque(v) for v in graph.inputs) or has_opaque(graph.outputs):
        return "an input or output of the step is not a tensor or a plain value"
    return ""


class _Names:
    """Variable names of the forward's tensors (``Namer`` for the matches)."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}

    def read(self, tensor: int) -> str:
        if tensor not in self.names:
            raise NotReplayable(f"tensor {tensor} is read before it is made")
        return self.names[tensor]

    def define(self, tensor: int) -> str:
        self.names[tensor] = f"v{tensor}"
        return self.names[tensor]


def _code(value, names: _Names) -> str:
    """Python source for an encoded value."""
    if isinstance(value, dict):
        if "tensor" in value:
            return names.read(value["tensor"])
        if "list" in value:
            items = [_code(v, names) for v in value["list"]]
            if value.get("tuple"):
                return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
            return "[" + ", ".join(items) + "]"
        if "dtype" in value:
            return f"torch.{value['dtype']}"
        if "device" in value:
            return "_kl_dev"
        if "layout" in value:
            return f"torch.{value['layout']}"
        if "memory_format" in value:
            return f"torch.{value['memory_format']}"
        if "float" in value:
            return f"float({value['float']!r})"
    if isinstance(value, float):
        return repr(decode_float(value))
    return repr(value)


def _leaf_expr(graph: OpGraph, leaf) -> str:
    info = graph.tensors[leaf.tensor]
    if leaf.kind == "input":
        return f"args[{leaf.position}]"
    if leaf.kind == "param":
        return f"self.get_parameter({leaf.name!r})"
    if leaf.kind == "buffer":
        return f"self.get_buffer({leaf.name!r})"
    if leaf.kind == "attr":
        owner, _, attr = leaf.name.rpartition(".")
        return f"getattr(self.get_submodule({owner!r}), {attr!r})"
    return f"torch.tensor({leaf.values!r}, dtype=torch.{info.dtype}, device=_kl_dev).reshape({list(info.shape)!r})"


def _live_nodes(graph: OpGraph, matches: list[Match]) -> set[int]:
    """Nodes whose results the step needs (pure nodes nothing reads are dropped; a node that
    writes in place is kept, a batch norm whose running statistics it updates too)."""
    claimed = {i for m in matches for i in m.nodes}
    needed = set(tensor_ids(graph.outputs))
    for m in matches:
        for i in m.nodes:
            needed.update(graph.nodes[i].tensor_args())
    live: set[int] = set()
    for node in reversed(graph.nodes):
        if node.index in claimed:
            continue
        made = {t for t in node.outputs if t is not None} | {new for _, new in node.writes}
        if node.written() or made & needed:  # a training batch norm updates its statistics unrecorded
            live.add(node.index)
            needed.update(node.tensor_args())
    return live


def _guard(graph: OpGraph) -> list[str]:
    checks = [f"len(args) == {len(graph.inputs)}"]
    if graph.training is not None:
        checks.append(f"self.training is {graph.training}")
    for i, value in enumerate(graph.inputs):
        if isinstance(value, dict) and "tensor" in value:
            t = graph.tensors[value["tensor"]]
            checks.append(f"_kl_same(args[{i}], {t.shape!r}, {t.stride!r}, torch.{t.dtype}, {t.device!r})")
        else:
            checks.append(f"not isinstance(args[{i}], torch.Tensor) and args[{i}] == {_code(value, _Names())}")
    return checks


_SAME = '''

def _kl_same(t, shape, stride, dtype, device):
    """Whether ``t`` is a tensor like the traced one (the replay holds only for those)."""
    return isinstance(t, torch.Tensor) and tuple(t.shape) == shape and t.stride() == stride and t.dtype == dtype and t.device.type == device


def _kl_strided(t, stride):
    """``t`` in the traced layout ``stride`` (a kernel writes row-major memory; what follows assumes the trace's)."""
    if t.stride() == stride:
        return t
    return torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device).copy_(t)
'''


def _replay(graph: OpGraph, matches: list[Match], region) -> list[str]:
    """The statements of the replayed step, each match's region written by ``region(match, names)``."""
    names = _Names()
    body: list[str] = []
    device_leaf = next((l for l in graph.leaves if l.kind in ("input", "param", "buffer")), None)
    if device_leaf is not None:
        body.append(f"_kl_dev = {_leaf_expr(graph, device_leaf)}.device")
    else:
        body.append("_kl_dev = torch.device('cpu')")
    for leaf in graph.leaves:
        body.append(f"{names.define(leaf.tensor)} = {_leaf_expr(graph, leaf)}")
    at_end = {max(m.nodes): m for m in matches}
    live = _live_nodes(graph, matches)
    for node in graph.nodes:
        if node.index in at_end:
            body.extend(region(at_end[node.index], names))
            for old, new in at_end[node.index].writes:
                names.names[new] = names.read(old)
            continue
        if node.index not in live:
            continue
        positional = [_code(a.value, names) for a in node.args if not a.kwarg_only]
        keywords = [f"{a.name}={_code(a.value, names)}" for a in node.args if a.kwarg_only]
        call = f"torch.ops.aten.{node.op.split('::', 1)[1]}.{node.overload or 'default'}({', '.join(positional + keywords)})"
        targets = [names.define(t) for t in node.outputs]
        if node.returns_tuple:
            body.append(f"{', '.join(targets) + (',' if len(targets) == 1 else '')} = {call}")
        else:
            body.append(f"{targets[0]} = {call}")
        for old, new in node.writes:
            names.names[new] = names.read(old)  # written in place: the same tensor object
    body.append(f"return {_code(graph.outputs, names)}")
    return body


def _kernel_lines(graph: OpGraph, matches: list[Match]) -> str:
    """The replay with each region's kernel call, indented as the body of a ``with`` in a method."""
    return "\n".join("            " + line for line in _replay(graph, matches, lambda match, names: laid_out(graph, match, names)))


#: The CUDA-graph runtime a graphed replay carries.
GRAPH_RUNTIME = "agents.strategist.cuda_graph.runtime"


def _graphed(graph: OpGraph, matches: list[Match], guard: str, mutated: list[int]) -> str:
    """``ModelNew`` whose replay is captured once per input signature in a CUDA graph and replayed
    with each call's inputs copied in (off a GPU, the replay runs as it is)."""
    lines = _kernel_lines(graph, matches)
    return (
        _SAME
        + f'''

class ModelNew(Model):
    """The reference's operators replayed, with {len(matches)} region(s) computed by kloom's kernels,
    the whole replay captured in a CUDA graph."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kl_graphs = {{}}

    def forward(self, *args):
        if not ({guard}):
            return super().forward(*args)
        return _kloom_graphed(self._kl_graphs, self._kl_replay, args, 3, {sorted(mutated)!r})

    def _kl_replay(self, *args):
        with torch.no_grad():
{lines}
'''
    )


def forward_source(graph: OpGraph, matches: list[Match], compile_mode: str | None = None, graphed: list[int] | None = None) -> str:
    """``ModelNew`` for the graph with ``matches`` replacing their regions; with ``compile_mode``,
    the replay compiled by inductor in that mode and each region an opaque operator
    (``compiled.py``); with ``graphed`` (the inputs the step mutates), the replay (or the compiled
    step) in a CUDA graph."""
    problem = replay_problem(graph)
    if problem:
        raise NotReplayable(problem)
    guard = " and ".join(_guard(graph))
    if graphed is not None and compile_mode is None:
        return _graphed(graph, matches, guard, graphed)
    if compile_mode is None:
        lines = _kernel_lines(graph, matches)
        return (
            _SAME
            + f'''

class ModelNew(Model):
    """The reference's operators replayed, with {len(matches)} region(s) computed by kloom's kernels."""

    def forward(self, *args):
        if not ({guard}):
            return super().forward(*args)
        with torch.no_grad():
{lines}
'''
        )
    try:
        regions = CompiledRegions(graph, matches)
    except NotCompilable as exc:
        raise NotReplayable(str(exc)) from None
    body = _replay(graph, matches, regions.call)
    lines = "\n".join("        " + line for line in body)
    # With ``graphed``: the compiled step captured in a CUDA graph (as the compile_cuda_graph
    # strategy captures inductor's code for the reference), so nothing is launched from Python.
    call = "self._kl_step(*args)" if graphed is None else f"_kloom_graphed(self._kl_graphs, self._kl_step, args, 3, {sorted(graphed)!r})"
    where = "" if graphed is None else ", the compiled step captured in a CUDA graph"
    graphs = "" if graphed is None else "\n        self._kl_graphs = {}"
    return (
        _SAME
        + regions.source
        + f'''

class ModelNew(Model):
    """The reference's operators replayed and compiled by inductor ({compile_mode}), with
    {len(matches)} region(s) computed by kloom's kernels as opaque operators{where}."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kl_step = torch.compile(self._kl_replay, dynamic=False, mode={compile_mode!r}){graphs}

    def forward(self, *args):
        if not ({guard}):
            return super().forward(*args)
        with torch.no_grad():
            return {call}

    def _kl_replay(self, *args):
{lines}
'''
    )


def candidate_source(reference: str, graph: OpGraph, matches: list[Match], label: str, compile_mode: str | None = None,
                     graphed: list[int] | None = None) -> str:
    """The whole candidate file; ``NotReplayable`` when a name of the kernels clashes with the
    reference's or the graph cannot be replayed (or, compiled, a region cannot be an operator)."""
    modules = sorted({m for match in matches for m in match.modules})
    embedded = "\nimport torch\n" + embed_kernels(modules) + (runtime_source(GRAPH_RUNTIME) if graphed is not None else "")
    model = forward_source(graph, matches, compile_mode, graphed)
    clash = clashes(reference, embedded + model)
    if clash:
        raise NotReplayable(f"the reference defines {', '.join(clash)}, which the kernels' code defines too")
    return reference.rstrip() + f"\n\n\n# ---- kloom kernels: {label} ----" + embedded + model


def _autotuned_defs(code: str) -> set[str]:
    """The functions ``code`` defines at its top level under ``@triton.autotune(...)``."""
    def autotune(d) -> bool:
        return isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "autotune"
    return {n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef) and any(autotune(d) for d in n.decorator_list)}


def tuned_block(code: str, pins: list[TunedConfig]) -> str:
    """Text to append to a candidate ``code`` that pins the autotuning choices of ``pins`` made
    for the kernels it defines (``kernels.tuning.seed_tuned``, embedded where the code lacks it),
    on its autotuned kernels now and on the autotuners its launchers make later; "" where none of
    the pins is for its kernels, the code does not parse (the evaluator's check says why), or the
    seeding code's names clash with the code's."""
    if not pins:
        return ""
    try:
        defined = bound_names(code)
    except SyntaxError:
        return ""
    used = [p for p in pins if defined.get(p.kernel) == "def"]
    if not used:
        return ""
    embedded = "" if defined.get("seed_tuned") == "def" else embed_kernels(["kernels.tuning"])
    if clashes(code, embedded):
        return ""
    tuners = sorted(_autotuned_defs(code) & {p.kernel for p in used})
    listed = "".join(f"    {p.to_dict()!r},\n" for p in used)
    return (f"{embedded}\n\n# ---- kloom: {len(used)} autotuning choice(s) the knowledge base kept on this hardware ----\n"
            f"seed_tuned([{', '.join(tuners)}], [\n{listed}])\n")
