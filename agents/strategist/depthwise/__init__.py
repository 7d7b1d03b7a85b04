"""Depthwise convolutions as shifted multiply-adds: a source rewrite of ``conv1d``/``conv2d`` calls.

A depthwise convolution (``groups`` equal to the input's channels, a weight of shape
``(C, 1, *taps)``) reads each input element ``taps`` times and does ``2 * taps`` flops with it: it
is memory-bound, yet cuDNN's depthwise kernels run far from the HBM floor (about 14x for a 4-tap
bf16 ``conv1d`` on H200), and inductor keeps every convolution as an extern cuDNN call, so
``torch.compile`` alone does not help. Written as a sum of shifted slices times per-channel taps,
the same convolution is elementwise work that inductor fuses, with the concatenation or padding
before it and the activation after it, into one pass over memory.

The rewrite renames calls of ``conv1d``/``conv2d`` (``torch.nn.functional`` or ``torch``, under any
alias) to helpers with the same signature, keeping the rest of the file's text. Calls that cannot
be depthwise as written (no ``groups`` argument or ``groups=1``, a literal stride or dilation other
than 1) are left alone. At run time the helper takes the fast path only for a floating-point,
batched, stride-1, dilation-1 depthwise convolution with integer (or ``"valid"``) padding; it
accumulates in float32 (float64 stays float64) and rounds once to the input's dtype, as cuDNN
does. Everything else calls the original convolution, so the rewrite never changes what is computed.
"""

from __future__ import annotations

import ast

from ..embed import runtime_source
from ..rewrites import is_module_call, module_aliases, rename_calls

#: The convolutions rewritten, and the helper each becomes.
HELPERS = {"conv1d": "_kloom_conv1d", "conv2d": "_kloom_conv2d"}
#: Modules whose ``conv1d``/``conv2d`` is the convolution (``torch.conv1d`` is the same operator).
_MODULES = ("torch.nn.functional", "torch")
#: Positions of the arguments that decide whether a call can be depthwise.
_POSITION = {"stride": 3, "dilation": 5, "groups": 6}

#: The runtime a candidate carries, copied from ``runtime.py``.
DEPTHWISE_HELPER = runtime_source(f"{__name__}.runtime")


def _argument(call: ast.Call, name: str) -> ast.expr | None:
    index = _POSITION[name]
    if len(call.args) > index:
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == name), None)


def _literal_other_than_one(node: ast.expr | None) -> bool:
    """A literal (a constant, or a tuple/list of constants) that is not all ones."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]
    if node is None or not all(isinstance(i, ast.Constant) for i in items):
        return False
    return any(i.value != 1 for i in items)


def _may_be_depthwise(call: ast.Call) -> bool:
    """Whether the call, as written, can be a depthwise convolution: it passes ``groups`` (not a
    literal 1), and its stride and dilation are not literals other than 1. Unpacked arguments
    (``*args``, ``**kwargs``) cannot be read, so such a call is rewritten and decided at run time."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return True
    groups = _argument(call, "groups")
    if groups is None or (isinstance(groups, ast.Constant) and groups.value == 1):
        return False
    return not any(_literal_other_than_one(_argument(call, name)) for name in ("stride", "dilation"))


def _convolutions(tree: ast.Module) -> list[tuple[ast.Call, str]]:
    """The calls that may be depthwise convolutions, each with the helper that replaces it."""
    aliases = [module_aliases(tree, module) for module in _MODULES]
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for name, helper in HELPERS.items():
            if any(is_module_call(node, name, modules, functions) for modules, functions in aliases):
                if _may_be_depthwise(node):
                    found.append((node, helper))
                break
    return found


def depthwise_conv(source: str) -> tuple[str, int]:
    """The source with each convolution call that may be depthwise renamed to its helper (the
    arguments, and the rest of the file, keep their text); returns it and the number of calls
    renamed (0: the source unchanged)."""
    tree = ast.parse(source)
    calls = _convolutions(tree)
    if not calls:
        return source, 0
    return rename_calls(source, calls), len(calls)
