"""The hybrid kernel candidate: inductor compiles the replayed graph, and each region a kloom
kernel computes is an opaque custom operator inside it.

The plain kernel candidate (``emit.py``) runs every operator outside the matched regions one at a
time, so on a step where a convolution or a GEMM sits among the kernels' regions it loses what
inductor fuses around them (and pays Python's dispatch per operator). Here the replay is compiled
whole: inductor fuses and schedules what kloom's kernels do not take, and calls the kernels where
they were measured to beat it. Each region becomes ``torch.library.custom_op`` with a fake
implementation built from the traced shapes, strides and dtypes, so the compiler sees one node of
known result per region and never traces into the kernel's launcher.

Operator names are unique per import: a later registration under a name already taken would
silently replace the earlier one's implementation, so each import takes the first free prefix
(``kloom_regions::c<n>_``) and a warm rank that imports two candidates keeps both intact.
"""

from __future__ import annotations

from kloom.opgraph import OpGraph

from .templates import Match, laid_out

#: Embedded once: the library namespace of this import, and outputs that own their memory (a
#: custom operator must not return a view of its input or of another output).
PRELUDE = '''

_kl_n = 0
while hasattr(torch.ops.kloom_regions, "c" + str(_kl_n) + "_region_0"):
    _kl_n += 1  # an earlier import in this process holds these names: registering again would replace its kernels
_KL_PREFIX = "kloom_regions::c" + str(_kl_n) + "_"


def _kl_owned(outs, ins):
    """``outs`` with any result that shares memory with an input or an earlier result copied."""
    seen = {t.untyped_storage().data_ptr() for t in ins if isinstance(t, torch.Tensor)}
    owned = []
    for t in outs:
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            t = t.clone()
            ptr = t.untyped_storage().data_ptr()
        seen.add(ptr)
        owned.append(t)
    return owned
'''


class _RegionNames:
    """The names a region's statement uses: its inputs become the operator's parameters."""

    def __init__(self) -> None:
        self.params: list[int] = []
        self.defined: dict[int, str] = {}

    def read(self, tensor: int) -> str:
        if tensor in self.defined:
            return self.defined[tensor]
        if tensor not in self.params:
            self.params.append(tensor)
        return f"a{tensor}"

    def define(self, tensor: int) -> str:
        self.defined[tensor] = f"v{tensor}"
        return self.defined[tensor]


class NotCompilable(ValueError):
    """A region that cannot be an opaque operator; the message says why."""


def region_operator(graph: OpGraph, match: Match, index: int) -> tuple[str, list[int]]:
    """The source that defines region ``index`` as a custom operator ``_kl_region_<index>``, and
    the tensor ids it takes, in order."""
    if match.writes:
        raise NotCompilable(f"{match.template} writes tensors in place, which an opaque operator may not")
    names = _RegionNames()
    statements = laid_out(graph, match, names)
    params = names.params
    if not params:
        raise NotCompilable(f"{match.template} reads no tensor")
    outs = [names.defined.get(t) for t in match.outputs]
    if any(o is None for o in outs):
        raise NotCompilable(f"{match.template} does not define all of its outputs")
    signature = ", ".join(f"a{t}: torch.Tensor" for t in params)
    single = len(outs) == 1
    returns = "torch.Tensor" if single else f"tuple[{', '.join(['torch.Tensor'] * len(outs))}]"
    arguments = ", ".join(f"a{t}" for t in params)
    body = "\n".join("    " + s for s in statements)
    result = "_kl_outs[0]" if single else "tuple(_kl_outs)"
    fakes = []
    for tid in match.outputs:
        info = graph.tensors[tid]
        fakes.append(
            f"torch.empty_strided({tuple(info.shape)!r}, {tuple(info.stride)!r}, dtype=torch.{info.dtype}, device=a{params[0]}.device)"
        )
    fake = fakes[0] if single else "(" + ", ".join(fakes) + ",)"
    source = f'''

def _kl_region_{index}_impl({signature}) -> {returns}:
{body}
    _kl_outs = _kl_owned([{", ".join(outs)}], [{arguments}])
    return {result}


_kl_region_{index} = torch.library.custom_op(_KL_PREFIX + "region_{index}", _kl_region_{index}_impl, mutates_args=())


@_kl_region_{index}.register_fake
def _kl_region_{index}_fake({arguments}):
    return {fake}
'''
    return source, params


class CompiledRegions:
    """Every match as an operator: their source, and the statement that calls each one."""

    def __init__(self, graph: OpGraph, matches: list[Match]):
        parts = [PRELUDE]
        self._ops: dict[int, tuple[int, list[int]]] = {}  # the match's last node -> (operator index, its inputs)
        for i, match in enumerate(matches):
            source, params = region_operator(graph, match, i)
            parts.append(source)
            self._ops[max(match.nodes)] = (i, params)
        self.source = "".join(parts)

    def call(self, match: Match, names) -> list[str]:
        """The statement computing ``match``'s outputs through its operator (a ``Namer`` names them)."""
        index, params = self._ops[max(match.nodes)]
        call = f"_kl_region_{index}(" + ", ".join(names.read(t) for t in params) + ")"
        targets = [names.define(t) for t in match.outputs]
        return [f"{', '.join(targets)} = {call}"]
