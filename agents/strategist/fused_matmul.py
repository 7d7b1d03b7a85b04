"""Collective + matmul pairs as torch symmetric memory's fused ops: a source rewrite.

Two tensor-parallel shapes are found by structure on the reference's syntax tree:

1. ``dist.all_gather_into_tensor(buf, shard)`` (default group, no other argument), later in the
   same block a matmul with the gathered buffer as an operand (``buf @ B``, ``torch.matmul(buf, B)``,
   ``F.linear(buf, w[, b])``, or transposed as the second operand: ``x @ buf.t()``, ``x @ buf.T``,
   ``F.linear(x, buf[, b])``). Both become one ``_kloom_ag_matmul(buf, shard, kind, other, bias)``
   at the matmul's place, which runs ``torch.ops.symm_mem.fused_all_gather_matmul``: the copy of
   shard i+1 overlaps the matmul of shard i. When ``buf`` is read again later, the matmul must be
   a plain ``y = ...`` and the call becomes ``buf, y = _kloom_ag_matmul(..., keep=True)``.
2. ``y = a @ b`` (``torch.matmul(a, b)``, ``F.linear(a, w)`` without bias), later in the same
   block ``dist.reduce_scatter_tensor(out, y)`` with the default (sum) reduction and group, and
   ``y`` read nowhere else but for its shape, dtype or device in between. The assignment becomes
   ``y = _KloomProduct(kind, a, b)`` (which answers shape questions without computing), the
   collective ``_kloom_matmul_rs(out, y)``, which runs ``fused_matmul_reduce_scatter``.

What is safe to move (the gather later, the matmul later): the buffer is a fresh local allocation
seen by nothing between; the statements in between are assignments to plain names that mention
neither the buffer nor the moved operands' names, call no in-place method (``x.add_``), pass no
``out=`` and call no collective; no compound statement sits between; the matmul is evaluated
unconditionally in its statement. Anything else keeps the original calls.

At run time the helpers take the fused op only on CUDA, world size > 1, the default group, one
of bf16/fp16/fp32 for every tensor, 2-D right-hand operands, contiguous shards and the exact
shapes the original calls imply; otherwise (and under ``torch.compile`` or CUDA-graph capture)
they run exactly the original two calls. A failure of the fused op on its first use switches the
process to the original calls for good, with a warning; after one success, failures propagate.
"""

from __future__ import annotations

import ast

from .rewrites import DistCalls, is_module_call, module_aliases, names_in, statement_blocks

#: Calls that return a fresh tensor: a buffer made by one of them is seen only through its name.
_ALLOCATORS = {"empty", "new_empty", "empty_like", "zeros", "new_zeros", "zeros_like", "ones", "new_ones", "ones_like", "full", "new_full", "full_like", "empty_strided"}
#: Attributes of the product that code between the matmul and the reduce-scatter may read.
_METADATA = {"shape", "dtype", "device", "ndim", "size", "dim"}
#: Nodes under which a sub-expression is evaluated conditionally, repeatedly or later.
_CONDITIONAL = (ast.IfExp, ast.BoolOp, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

FUSED_MATMUL_HELPER = '''
import warnings as _kl_warnings
import torch as _kl_torch
import torch.distributed as _kl_dist
import torch.distributed._symmetric_memory as _kl_symm
import torch.nn.functional as _kl_F

#: Tests set this to raise when a call on CUDA does not take the fused path.
_KL_FUSED_STRICT = False
#: Fused calls made, calls that ran the original collectives, and why the fused ops were given up.
_KL_FUSED = {"ag_matmul": 0, "matmul_rs": 0, "fallback": 0, "ok": False, "broken": None, "group": None}
_KL_FUSED_DTYPES = (_kl_torch.bfloat16, _kl_torch.float16, _kl_torch.float32)


def _kloom_symm_group(tensors):
    """The default group's name when a fused op may run on ``tensors``, else None."""
    if _KL_FUSED["broken"] is not None or _kl_torch.compiler.is_compiling():
        return None
    first = tensors[0]
    if not all(t.is_cuda and t.device == first.device and t.dtype == first.dtype for t in tensors):
        return None
    if first.dtype not in _KL_FUSED_DTYPES or not _kl_dist.is_initialized() or _kl_dist.get_world_size() < 2:
        return None
    if _kl_torch.cuda.is_current_stream_capturing():
        return None
    ops = _kl_torch.ops.symm_mem
    if not (hasattr(ops, "fused_all_gather_matmul") and hasattr(ops, "fused_matmul_reduce_scatter")):
        return None
    return _KL_FUSED["group"] or _kl_dist.group.WORLD.group_name


def _kloom_fused(fn, *args):
    """``fn(*args)``. On the first use a failure (symmetric memory unavailable on this machine)
    is reported as a warning and switches this process to the original collectives for good;
    once a fused call has succeeded, a failure propagates."""
    try:
        if _KL_FUSED["group"] is None:
            name = _kl_dist.group.WORLD.group_name
            if hasattr(_kl_symm, "enable_symm_mem_for_group"):  # needed by older torch, deprecated later
                with _kl_warnings.catch_warnings():
                    _kl_warnings.simplefilter("ignore", FutureWarning)
                    _kl_symm.enable_symm_mem_for_group(name)
            _KL_FUSED["group"] = name
        out = fn(*args)
    except Exception as exc:
        if _KL_FUSED["ok"]:
            raise
        _KL_FUSED["broken"] = f"{type(exc).__name__}: {exc}"
        _kl_warnings.warn("kloom: symmetric-memory fused matmul unavailable, using the original collectives: " + _KL_FUSED["broken"])
        return None
    _KL_FUSED["ok"] = True
    return out


def _kloom_not_fused(tensor):
    _KL_FUSED["fallback"] += 1
    if _KL_FUSED_STRICT and tensor.is_cuda:
        raise RuntimeError("kloom: the fused symmetric-memory path was not taken (" + str(_KL_FUSED["broken"]) + ")")


def _kloom_ag_matmul_fused(shard, kind, other, bias, group):
    world = _kl_dist.get_world_size()
    if kind in ("mm", "linear"):
        B = other if kind == "mm" else other.t()
        if not (shard.dim() >= 2 and B.dim() == 2 and B.shape[0] == shard.shape[-1]):
            return None
        gathered, outs = _kl_torch.ops.symm_mem.fused_all_gather_matmul(shard, [B], 0, group)
        y = outs[0]
    else:
        # other @ gathered.t() == (gathered @ other.t()).t(): the gathered shard is the left operand.
        if not (shard.dim() == 2 and other.dim() >= 2 and other.shape[-1] == shard.shape[1]):
            return None
        B = other.reshape(-1, other.shape[-1]).t()
        gathered, outs = _kl_torch.ops.symm_mem.fused_all_gather_matmul(shard, [B], 0, group)
        y = outs[0].t().contiguous().view(*other.shape[:-1], world * shard.shape[0])
    if bias is not None:
        y = y + bias
    return gathered, y


def _kloom_ag_matmul(buf, shard, kind, other, bias=None, keep=False):
    """``all_gather_into_tensor(buf, shard)`` then the matmul ``kind`` names, as one fused op:
    ``mm``: buf @ other, ``linear``: F.linear(buf, other, bias), ``mm_t``: other @ buf.t(),
    ``mm_T``: other @ buf.T, ``linear_t``: F.linear(other, buf, bias). Returns the product, or
    (the gathered tensor, the product) with ``keep``."""
    tensors = [buf, shard, other] + ([bias] if bias is not None else [])
    if all(isinstance(t, _kl_torch.Tensor) for t in tensors):
        group = _kloom_symm_group(tensors)
        expected = (_kl_dist.get_world_size() * shard.shape[0],) + tuple(shard.shape[1:]) if group else None
        if group and shard.dim() >= 1 and shard.is_contiguous() and tuple(buf.shape) == expected:
            out = _kloom_fused(_kloom_ag_matmul_fused, shard, kind, other, bias, group)
            if out is not None:
                _KL_FUSED["ag_matmul"] += 1
                return out if keep else out[1]
        _kloom_not_fused(buf)
    _kl_dist.all_gather_into_tensor(buf, shard)
    if kind == "mm":
        y = buf @ other
    elif kind == "linear":
        y = _kl_F.linear(buf, other, bias)
    elif kind == "mm_t":
        y = other @ buf.t()
    elif kind == "mm_T":
        y = other @ buf.T
    else:
        y = _kl_F.linear(other, buf, bias)
    return (buf, y) if keep else y


class _KloomProduct:
    """A matmul (``mm``: a @ b, ``linear``: F.linear(a, b)) whose computation waits for the
    reduce-scatter that consumes it, so that both can run as one fused op; until then it answers
    questions about the product's shape, dtype and device (computed on the meta device, so a
    mismatch raises what the matmul raises, where it would)."""

    def __init__(self, kind, a, b):
        self.kind, self.a, self.b = kind, a, b
        self._meta = self._compute(_kl_torch.empty_like(a, device="meta"), _kl_torch.empty_like(b, device="meta"))
        self.shape, self.dtype, self.ndim, self.device = self._meta.shape, self._meta.dtype, self._meta.ndim, a.device

    def _compute(self, a, b):
        return a @ b if self.kind == "mm" else _kl_F.linear(a, b)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return self.ndim

    def value(self):
        return self._compute(self.a, self.b)


def _kloom_matmul_rs(out, product, op=None):
    """``reduce_scatter_tensor(out, product.value())`` (a sum over the default group), through
    ``fused_matmul_reduce_scatter`` where it applies."""
    if not isinstance(product, _KloomProduct):
        return _kl_dist.reduce_scatter_tensor(out, product) if op is None else _kl_dist.reduce_scatter_tensor(out, product, op=op)
    a, b = product.a, product.b if product.kind == "mm" else product.b.t()
    if isinstance(out, _kl_torch.Tensor) and (op is None or op == _kl_dist.ReduceOp.SUM):
        group = _kloom_symm_group([out, a, b])
        world = _kl_dist.get_world_size() if group else 1
        shape = tuple(product.shape)
        fits = (
            group is not None and a.dim() >= 2 and b.dim() == 2 and a.is_contiguous()
            and len(shape) >= 2 and shape[0] % world == 0
            and tuple(out.shape) == (shape[0] // world,) + shape[1:]
        )
        if fits:
            reduced = _kloom_fused(_kl_torch.ops.symm_mem.fused_matmul_reduce_scatter, a, b, "sum", 0, group)
            if reduced is not None:
                out.copy_(reduced)
                _KL_FUSED["matmul_rs"] += 1
                return None
        _kloom_not_fused(out)
    value = product.value()
    if op is None:
        return _kl_dist.reduce_scatter_tensor(out, value)
    return _kl_dist.reduce_scatter_tensor(out, value, op=op)
'''


def _call_name(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


class _Finder(DistCalls):
    def __init__(self, tree: ast.Module):
        super().__init__(tree)
        self.torch = module_aliases(tree, "torch")
        self.functional = module_aliases(tree, "torch.nn.functional")

    def is_sum(self, op: ast.expr) -> bool:
        if not (isinstance(op, ast.Attribute) and op.attr == "SUM"):
            return False
        owner = op.value
        if isinstance(owner, ast.Name) and self.functions.get(owner.id) == "ReduceOp":
            return True
        return isinstance(owner, ast.Attribute) and owner.attr == "ReduceOp" and ast.unparse(owner.value) in self.modules

    # The collectives ----------------------------------------------------------------------------
    def gather(self, stmt: ast.stmt) -> tuple[str, ast.expr] | None:
        """``all_gather_into_tensor(name, shard)`` with nothing else: (name, shard)."""
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and self.is_dist(stmt.value, "all_gather_into_tensor")):
            return None
        call = stmt.value
        if call.keywords or len(call.args) != 2 or not isinstance(call.args[0], ast.Name) or isinstance(call.args[1], ast.Starred):
            return None
        return call.args[0].id, call.args[1]

    def reduce_scatter(self, stmt: ast.stmt, product: str) -> ast.Call | None:
        """``reduce_scatter_tensor(out, product[, op=SUM])``, else None."""
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and self.is_dist(stmt.value, "reduce_scatter_tensor")):
            return None
        call = stmt.value
        if not (2 <= len(call.args) <= 3) or any(isinstance(a, ast.Starred) for a in call.args):
            return None
        if not (isinstance(call.args[1], ast.Name) and call.args[1].id == product) or product in names_in(call.args[0]):
            return None
        kw = {k.arg: k.value for k in call.keywords}
        if set(kw) - {"op"} or (len(call.args) == 3 and kw):
            return None
        op = call.args[2] if len(call.args) == 3 else kw.get("op")
        return call if op is None or self.is_sum(op) else None

    # The matmuls ----------------------------------------------------------------------------------
    def linear_args(self, call: ast.Call) -> tuple[ast.expr, ast.expr, ast.expr | None] | None:
        if not is_module_call(call, "linear", *self.functional):
            return None
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords) or len(call.args) > 3:
            return None
        slots = dict(zip(("input", "weight", "bias"), call.args))
        for k in call.keywords:
            if k.arg not in ("input", "weight", "bias") or k.arg in slots:
                return None
            slots[k.arg] = k.value
        if "input" not in slots or "weight" not in slots:
            return None
        bias = slots.get("bias")
        if isinstance(bias, ast.Constant) and bias.value is None:
            bias = None
        return slots["input"], slots["weight"], bias

    def matmul_args(self, node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
        """(left, right) of ``left @ right`` or ``torch.matmul(left, right)``."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return node.left, node.right
        if isinstance(node, ast.Call) and is_module_call(node, "matmul", *self.torch):
            if len(node.args) == 2 and not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args):
                return node.args[0], node.args[1]
        return None

    def gathered_matmul(self, node: ast.AST, buf: str) -> tuple[str, ast.expr, ast.expr | None] | None:
        """``node`` as a matmul with the buffer ``buf`` as an operand: (kind, other operand, bias)."""
        is_buf = lambda e: isinstance(e, ast.Name) and e.id == buf  # noqa: E731

        def transposed(e: ast.expr) -> str | None:
            if isinstance(e, ast.Attribute) and e.attr == "T" and is_buf(e.value):
                return "mm_T"
            if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "t" and is_buf(e.func.value) and not e.args and not e.keywords:
                return "mm_t"
            return None

        pair = self.matmul_args(node)
        if pair is not None:
            left, right = pair
            if is_buf(left) and buf not in names_in(right):
                return "mm", right, None
            kind = transposed(right)
            if kind and buf not in names_in(left):
                return kind, left, None
            return None
        if isinstance(node, ast.Call):
            args = self.linear_args(node)
            if args is not None:
                x, w, bias = args
                rest = names_in(w) | (names_in(bias) if bias is not None else set())
                if is_buf(x) and buf not in rest:
                    return "linear", w, bias
                rest = names_in(x) | (names_in(bias) if bias is not None else set())
                if is_buf(w) and buf not in rest:
                    return "linear_t", x, bias
        return None

    def product(self, stmt: ast.stmt) -> tuple[str, str, ast.expr, ast.expr] | None:
        """``y = a @ b`` (or ``torch.matmul``, or ``F.linear`` without bias): (y, kind, a, b)."""
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return None
        pair = self.matmul_args(stmt.value)
        if pair is not None:
            return stmt.targets[0].id, "mm", pair[0], pair[1]
        if isinstance(stmt.value, ast.Call):
            args = self.linear_args(stmt.value)
            if args is not None and args[2] is None:
                return stmt.targets[0].id, "linear", args[0], args[1]
        return None

    def neutral(self, stmt: ast.stmt, avoid: set[str]) -> bool:
        """Whether a statement between the two calls is safe to move a call across: an assignment
        to plain names that mentions no name in ``avoid``, calls no in-place method, passes no
        ``out=`` and calls no collective."""
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets = [stmt.target]
        else:
            return False
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
                    return False
        if names_in(stmt) & avoid or self.has_collective(stmt):
            return False
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                name = _call_name(node)
                if (name and name.endswith("_") and not name.startswith("_")) or any(k.arg == "out" for k in node.keywords):
                    return False
            if isinstance(node, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
                return False
        return True


def _parents(root: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(root) for child in ast.iter_child_nodes(node)}


def _loads(scope: ast.AST, name: str) -> list[ast.Name]:
    return [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]


def _inside(node: ast.AST, stop: ast.AST, parents: dict[int, ast.AST], kinds) -> bool:
    """Whether an ancestor of ``node`` below ``stop`` is one of ``kinds``."""
    current = parents.get(id(node))
    while current is not None and current is not stop:
        if isinstance(current, kinds):
            return True
        current = parents.get(id(current))
    return False


def _is_allocation(stmt: ast.stmt, name: str) -> bool:
    return (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and stmt.targets[0].id == name
        and isinstance(stmt.value, ast.Call)
        and _call_name(stmt.value) in _ALLOCATORS
    )


class _Rewriter:
    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.finder = _Finder(tree)
        self.count = 0

    def run(self) -> None:
        for func in [n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            parents = _parents(func)
            for owner, _, block in list(statement_blocks(func)):
                if _inside(block[0], func, parents, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                    continue  # a nested function's blocks are visited as its own
                looped = owner is not func and (isinstance(owner, (ast.For, ast.AsyncFor, ast.While)) or _inside(owner, func, parents, (ast.For, ast.AsyncFor, ast.While)))
                self.gathers(func, block, parents, looped)
                self.reduce_scatters(func, block, parents)

    # 1. all-gather, then a matmul of the gathered buffer ----------------------------------------------
    def gathers(self, func: ast.AST, block: list[ast.stmt], parents: dict[int, ast.AST], looped: bool) -> None:
        i = 0
        while i < len(block):
            found = self.finder.gather(block[i])
            if found is not None and self.gather_then_matmul(func, block, i, found, parents, looped):
                continue  # block[i] is now the statement after the removed gather
            i += 1

    def gather_then_matmul(self, func, block, i, found, parents, looped) -> bool:
        buf, shard = found
        # The buffer: a fresh allocation in this block, unseen between it and the gather.
        alloc = next((k for k in range(i - 1, -1, -1) if buf in {t.id for s in [block[k]] for t in ast.walk(s) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}), None)
        if alloc is None or not _is_allocation(block[alloc], buf) or any(buf in names_in(s) for s in block[alloc + 1 : i]):
            return False
        avoid = names_in(shard) | {buf}
        for j in range(i + 1, len(block)):
            stmt = block[j]
            if buf not in names_in(stmt):
                if not self.finder.neutral(stmt, avoid):
                    return False
                continue
            return self.rewrite_matmul(func, block, i, j, buf, shard, parents, looped)
        return False

    def rewrite_matmul(self, func, block, i, j, buf, shard, parents, looped) -> bool:
        stmt = block[j]
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Return)) or getattr(stmt, "value", None) is None:
            return False
        uses = [n for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id == buf]
        if len(uses) != 1 or self.finder.has_collective(stmt):
            return False
        node = uses[0]
        match = None
        while node is not stmt:
            node = parents[id(node)]
            match = self.finder.gathered_matmul(node, buf)
            if match is not None:
                break
        if match is None or _inside(node, stmt, parents, _CONDITIONAL):
            return False
        kind, other, bias = match
        # Read again later (or in another iteration, or from a nested function): keep the gathered tensor.
        others = [n for n in _loads(func, buf) if n is not uses[0] and n is not block[i].value.args[0]]
        if any(_inside(n, func, parents, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) for n in others):
            return False
        later = [n for n in others if looped or n.lineno > stmt.end_lineno or (n.lineno == stmt.end_lineno and n.col_offset > stmt.end_col_offset)]
        keep = bool(later)
        if keep and not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) and stmt.value is node):
            return False
        args = [ast.Name(buf, ast.Load()), block[i].value.args[1], ast.Constant(kind), other]
        if bias is not None:
            args.append(bias)
        call = ast.Call(ast.Name("_kloom_ag_matmul", ast.Load()), args, [ast.keyword("keep", ast.Constant(True))] if keep else [])
        if keep:
            target = ast.Tuple([ast.Name(buf, ast.Store()), ast.Name(stmt.targets[0].id, ast.Store())], ast.Store())
            block[j] = ast.copy_location(ast.Assign([target], call), stmt)
        else:
            _replace(parents[id(node)], node, call)
        del block[i]
        self.count += 1
        return True

    # 2. a matmul, then the reduce-scatter of its product --------------------------------------------------
    def reduce_scatters(self, func, block, parents) -> None:
        for i, stmt in enumerate(block):
            found = self.finder.product(stmt)
            if found is None:
                continue
            y, kind, a, b = found
            avoid = names_in(a) | names_in(b)
            if y in avoid:
                continue
            metadata: list[ast.Name] = []
            for j in range(i + 1, len(block)):
                call = self.finder.reduce_scatter(block[j], y)
                if call is not None:
                    allowed = {id(call.args[1])} | {id(n) for n in metadata}
                    if any(id(n) not in allowed for n in _loads(func, y)):
                        break  # the product is used otherwise
                    block[i] = ast.copy_location(ast.Assign(stmt.targets, ast.Call(ast.Name("_KloomProduct", ast.Load()), [ast.Constant(kind), a, b], [])), stmt)
                    block[j].value = ast.copy_location(ast.Call(ast.Name("_kloom_matmul_rs", ast.Load()), call.args[:2], _op_keyword(call)), call)
                    self.count += 1
                    break
                between = block[j]
                uses = [n for n in ast.walk(between) if isinstance(n, ast.Name) and n.id == y]
                if not self.finder.neutral(between, avoid) or not all(_metadata_use(n, parents) for n in uses):
                    break
                if any(isinstance(t, ast.Name) and t.id == y for t in ast.walk(between) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)):
                    break
                metadata += uses


def _op_keyword(call: ast.Call) -> list[ast.keyword]:
    if len(call.args) == 3:
        return [ast.keyword("op", call.args[2])]
    return [k for k in call.keywords if k.arg == "op"]


def _metadata_use(name: ast.Name, parents: dict[int, ast.AST]) -> bool:
    """``y.shape``, ``y.dtype``, ``y.device``, ``y.ndim``, ``y.size(...)``, ``y.dim()``."""
    parent = parents.get(id(name))
    if not (isinstance(parent, ast.Attribute) and parent.value is name and parent.attr in _METADATA):
        return False
    if parent.attr in ("size", "dim"):
        call = parents.get(id(parent))
        return isinstance(call, ast.Call) and call.func is parent
    return True


def _replace(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for field, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, field, ast.copy_location(new, old))
            return
        if isinstance(value, list):
            for k, item in enumerate(value):
                if item is old:
                    value[k] = ast.copy_location(new, old)
                    return
    raise ValueError("node not found in its parent")


def fused_ag_matmul(source: str) -> tuple[str, int]:
    """The source with each all-gather + matmul and each matmul + reduce-scatter that may fuse
    routed through the helpers; returns it and the number of pairs rewritten (0: unchanged)."""
    tree = ast.parse(source)
    rewriter = _Rewriter(tree)
    rewriter.run()
    if not rewriter.count:
        return source, 0
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n", rewriter.count
