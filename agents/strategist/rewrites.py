"""Source-to-source rewrites of a reference's collectives, applied on its syntax tree.

Each rewrite finds a structural pattern (a call of a ``torch.distributed`` collective, whatever the
module alias) and replaces it with a call of a helper that the coder appends to the candidate.
The helpers fall back to the original collective whenever their fast path does not apply, so a
rewrite never changes what is computed.
"""

from __future__ import annotations

import ast


def dist_aliases(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """Names bound to ``torch.distributed``, and the local names of functions imported from it
    (``from torch.distributed import all_reduce as ar`` gives ``{"ar": "all_reduce"}``)."""
    modules: set[str] = set()
    functions: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch.distributed" and alias.asname:
                    modules.add(alias.asname)
                elif alias.name in ("torch", "torch.distributed") and not alias.asname:
                    modules.add("torch.distributed")
        elif isinstance(node, ast.ImportFrom):
            if node.module == "torch":
                for alias in node.names:
                    if alias.name == "distributed":
                        modules.add(alias.asname or "distributed")
            elif node.module == "torch.distributed":
                for alias in node.names:
                    functions[alias.asname or alias.name] = alias.name
    return modules, functions


def is_dist_call(node: ast.Call, name: str, modules: set[str], functions: dict[str, str]) -> bool:
    """Whether ``node`` calls the ``torch.distributed`` function ``name``, under any alias."""
    func = node.func
    if isinstance(func, ast.Name):
        return functions.get(func.id) == name
    if isinstance(func, ast.Attribute) and func.attr == name:
        return ast.unparse(func.value) in modules
    return False


class _CallRenamer(ast.NodeTransformer):
    def __init__(self, name: str, helper: str, modules: set[str], functions: dict[str, str]):
        self.name, self.helper, self.modules, self.functions = name, helper, modules, functions
        self.count = 0

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if is_dist_call(node, self.name, self.modules, self.functions):
            self.count += 1
            return ast.copy_location(ast.Call(func=ast.Name(id=self.helper, ctx=ast.Load()), args=node.args, keywords=node.keywords), node)
        return node


def rename_collective(source: str, name: str, helper: str) -> tuple[str, int]:
    """Replace every call of the collective ``name`` with ``helper(...)``; returns the new source and the count."""
    tree = ast.parse(source)
    modules, functions = dist_aliases(tree)
    renamer = _CallRenamer(name, helper, modules, functions)
    tree = renamer.visit(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree), renamer.count


def count_calls(source: str, name: str) -> int:
    tree = ast.parse(source)
    modules, functions = dist_aliases(tree)
    return sum(1 for n in ast.walk(tree) if isinstance(n, ast.Call) and is_dist_call(n, name, modules, functions))


#: Appended when ``all_reduce`` calls are rewritten: small sum all-reduces of contiguous CUDA
#: tensors on the default group go through torch symmetric memory (peer-to-peer loads, no
#: NVLink multicast), everything else through the original collective.
SYMM_ALLREDUCE_HELPER = '''
import torch as _kl_torch
import torch.distributed as _kl_dist
import torch.distributed._symmetric_memory as _kl_symm

_KL_SYMM_MAX_BYTES = {max_bytes}
_KL_SYMM_ALGO = "{algo}"
_kl_symm_buffers = {{}}


def _kloom_all_reduce(tensor, op=None, group=None, async_op=False):
    nbytes = tensor.numel() * tensor.element_size()
    eligible = (
        tensor.is_cuda
        and not async_op
        and group is None
        and (op is None or op == _kl_dist.ReduceOp.SUM)
        and tensor.is_contiguous()
        and 0 < nbytes <= _KL_SYMM_MAX_BYTES
        and _kl_dist.get_world_size() > 1
    )
    if not eligible:
        if op is None:
            return _kl_dist.all_reduce(tensor, group=group, async_op=async_op)
        return _kl_dist.all_reduce(tensor, op=op, group=group, async_op=async_op)
    group_name = _kl_dist.group.WORLD.group_name
    key = (tensor.numel(), tensor.dtype, tensor.device)
    buffer = _kl_symm_buffers.get(key)
    if buffer is None:
        _kl_symm.enable_symm_mem_for_group(group_name)
        buffer = _kl_symm.empty(tensor.numel(), dtype=tensor.dtype, device=tensor.device)
        _kl_symm.rendezvous(buffer, group_name)
        _kl_symm_buffers[key] = buffer
    buffer.copy_(tensor.reshape(-1))
    if _KL_SYMM_ALGO == "two_shot":
        _kl_torch.ops.symm_mem.two_shot_all_reduce_(buffer, "sum", group_name)
        tensor.copy_(buffer.view_as(tensor))
    else:
        tensor.copy_(_kl_torch.ops.symm_mem.one_shot_all_reduce(buffer, "sum", group_name).view_as(tensor))
    return None
'''
